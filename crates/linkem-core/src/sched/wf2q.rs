//! `wf2q+`: Worst-case Fair Weighted Fair Queueing plus.
//!
//! # Reference
//! J. C. R. Bennett, H. Zhang, "Hierarchical Packet Fair Queueing
//! Algorithms", IEEE/ACM ToN 5(5), 1997, §4 (WF²Q+).
//!
//! Each class i has weight w_i and virtual start and finish times S_i, F_i of
//! its head packet; the scheduler has a virtual time V.
//! - A class becoming backlogged with a head of length L: `S_i = max(F_i, V)`,
//!   `F_i = S_i + L/w_i`.
//! - After class i sends its head, its next head (length L'): `S_i = F_i`,
//!   `F_i = S_i + L'/w_i`.
//! - Selection: among the **eligible** classes (S_i ≤ V) the one with the
//!   smallest F_i (ties: lower class number). If none is eligible,
//!   `V = min S_i` first.
//! - After sending L bytes: `V ← V + L/W`, W the sum of the weights of the
//!   backlogged classes (the one that sent included), then `V = max(V, min
//!   S_i)`, which the selection step does lazily.
//!
//! Virtual times are integers in units of 2⁻³² byte per weight (`L·2³²/w`,
//! floored), so they never drift and ties are exact. Two binary heaps keep
//! ineligible classes by S and eligible ones by F: O(log N) per packet.
//! Default weight 1, range 1..100 (Dummynet's).

use super::{Dropped, Pkt, QueueParams, Queues, Scheduler};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Fixed-point shift of virtual times.
pub const SHIFT: u32 = 32;

/// The `wf2q+` scheduler: per class its weight w_i and virtual start and
/// finish S_i, F_i (fixed point, 2^[`SHIFT`] per byte of weight 1), the
/// system virtual time V, W = Σ w_i over backlogged classes, and two heaps:
/// eligible classes (S_i ≤ V) by F_i, the others by S_i.
#[derive(Debug, Default)]
pub struct Wf2q {
    w: Vec<u64>,
    s: Vec<u128>,
    f: Vec<u128>,
    backlogged: Vec<bool>,
    v: u128,
    wsum: u64,
    eligible: BinaryHeap<Reverse<(u128, u32)>>,
    waiting: BinaryHeap<Reverse<(u128, u32)>>,
}

impl Wf2q {
    #[inline]
    fn tag(len: u32, w: u64) -> u128 {
        ((len as u128) << SHIFT) / w as u128
    }

    fn place(&mut self, c: u32) {
        let ci = c as usize;
        if self.s[ci] <= self.v {
            self.eligible.push(Reverse((self.f[ci], c)));
        } else {
            self.waiting.push(Reverse((self.s[ci], c)));
        }
    }

    /// The system virtual time V in bytes per unit of weight (for tests and
    /// statistics): it grows by L/W per L bytes sent.
    pub fn virtual_time(&self) -> f64 {
        self.v as f64 / (1u64 << SHIFT) as f64
    }
}

impl Scheduler for Wf2q {
    fn add_class(&mut self, _class: u32, p: &QueueParams) {
        self.w.push(p.weight.max(1) as u64);
        self.s.push(0);
        self.f.push(0);
        self.backlogged.push(false);
    }

    fn enqueued(&mut self, c: u32, qs: &Queues) {
        let ci = c as usize;
        if self.backlogged[ci] {
            return;
        }
        let len = qs.head_len(c).expect("a packet was just queued");
        self.backlogged[ci] = true;
        self.wsum += self.w[ci];
        self.s[ci] = self.f[ci].max(self.v);
        self.f[ci] = self.s[ci] + Self::tag(len, self.w[ci]);
        self.place(c);
    }

    fn dequeue(
        &mut self,
        now: u64,
        qs: &mut Queues,
        drops: &mut Vec<Dropped>,
    ) -> Option<(u32, Pkt, bool)> {
        loop {
            if self.eligible.is_empty() {
                let Reverse((s, _)) = *self.waiting.peek()?;
                self.v = self.v.max(s);
            }
            while let Some(&Reverse((s, c))) = self.waiting.peek() {
                if s > self.v {
                    break;
                }
                self.waiting.pop();
                self.eligible.push(Reverse((self.f[c as usize], c)));
            }
            let Reverse((_, c)) = self.eligible.pop().expect("one is eligible now");
            let ci = c as usize;
            let got = qs.pop(now, c, drops);
            if let Some((p, _)) = got {
                self.v += ((p.len_bytes as u128) << SHIFT) / self.wsum as u128;
            }
            match qs.head_len(c) {
                Some(len) => {
                    self.s[ci] = self.f[ci];
                    self.f[ci] = self.s[ci] + Self::tag(len, self.w[ci]);
                    self.place(c);
                }
                None => {
                    self.backlogged[ci] = false;
                    self.wsum -= self.w[ci];
                }
            }
            if let Some((p, mark)) = got {
                return Some((c, p, mark));
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.wsum == 0
    }
}

//! `rr`: Deficit Round Robin as Dummynet runs it.
//!
//! # Reference
//! M. Shreedhar, G. Varghese, "Efficient Fair Queuing using Deficit Round
//! Robin", SIGCOMM 1995; the rules below are those of Dummynet's `rr`
//! (FreeBSD `sys/netpfil/ipfw/dn_sched_rr.c`), which differ from the paper's
//! Figure 3 in when credit is given and when a queue leaves the ring:
//! - Each queue i has its own quantum Q_i = weight_i × lmax_i bytes (weight
//!   1..65536, default 1; `lmax` 64..2048, default the scheduler's
//!   `quantum`, itself default 1514: Dummynet's default 1500 IP bytes as an
//!   Ethernet frame).
//! - A queue that is not in the ring and receives a packet joins the tail of
//!   the ring with credit_i = Q_i.
//! - Dequeue looks at the head queue of the ring:
//!   - empty: it leaves the ring (it is dropped from the ring only here, when
//!     its turn comes round, so a queue that empties keeps its place and its
//!     credit until then, and a packet arriving meanwhile is served with
//!     that credit);
//!   - head packet of L bytes with L > credit_i: credit_i += Q_i and the ring
//!     turns (the queue goes to the tail);
//!   - else credit_i −= L and the packet is sent; the queue stays at the head.
//!
//! Lengths are frame bytes (Dummynet counts IP bytes). O(1) per packet when
//! Q_i ≥ the largest packet.

use super::{Dropped, Pkt, QueueParams, Queues, Scheduler};
use std::collections::VecDeque;

/// Smallest `lmax` (Dummynet's `min_q`).
pub const MIN_LMAX_BYTES: u32 = 64;
/// Largest `lmax` (Dummynet's `max_q`).
pub const MAX_LMAX_BYTES: u32 = 2048;
/// Largest weight (Dummynet's bound for `rr`).
pub const MAX_WEIGHT: u32 = 65536;

/// The `rr` scheduler: the ring (front = the queue whose turn it is), and
/// per class its quantum Q_i = weight × lmax, its credit in bytes, and
/// whether it is in the ring.
#[derive(Debug)]
pub struct Drr {
    default_lmax_bytes: u32,
    quantum: Vec<u64>,
    credit: Vec<u64>,
    in_ring: Vec<bool>,
    ring: VecDeque<u32>,
}

impl Drr {
    /// A DRR whose queues without `lmax` take `default_lmax_bytes` (the
    /// scheduler's `quantum`, default 1514).
    pub fn new(default_lmax_bytes: u32) -> Self {
        Drr {
            default_lmax_bytes,
            quantum: Vec::new(),
            credit: Vec::new(),
            in_ring: Vec::new(),
            ring: VecDeque::new(),
        }
    }
}

impl Scheduler for Drr {
    fn add_class(&mut self, _class: u32, p: &QueueParams) {
        let lmax = p.lmax_bytes.unwrap_or(self.default_lmax_bytes);
        self.quantum.push(p.weight.max(1) as u64 * lmax as u64);
        self.credit.push(0);
        self.in_ring.push(false);
    }
    #[inline]
    fn enqueued(&mut self, c: u32, _: &Queues) {
        let ci = c as usize;
        if !self.in_ring[ci] {
            self.in_ring[ci] = true;
            self.credit[ci] = self.quantum[ci];
            self.ring.push_back(c);
        }
    }
    fn dequeue(
        &mut self,
        now: u64,
        qs: &mut Queues,
        drops: &mut Vec<Dropped>,
    ) -> Option<(u32, Pkt, bool)> {
        loop {
            let &c = self.ring.front()?;
            let ci = c as usize;
            match qs.head_len(c) {
                None => {
                    self.ring.pop_front();
                    self.in_ring[ci] = false;
                }
                Some(len) if len as u64 > self.credit[ci] => {
                    self.credit[ci] += self.quantum[ci];
                    self.ring.rotate_left(1);
                }
                Some(len) => {
                    // Charged the head's length before its AQM runs, as
                    // Dummynet does: CoDel may drop it and send a later one.
                    self.credit[ci] -= len as u64;
                    if let Some((p, mark)) = qs.pop(now, c, drops) {
                        return Some((c, p, mark));
                    }
                }
            }
        }
    }
    fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }
}

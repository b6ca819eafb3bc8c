//! `fifo`: every class's packets leave in their arrival order.
//!
//! # Reference
//! First come, first served over the whole scheduler. Each class is itself a
//! FIFO, so the scheduler keeps only the order of classes of the arrivals
//! (one entry per packet); a packet an AQM drops at dequeue leaves a stale
//! entry, skipped later (`skip`). O(1) per packet.

use super::{Dropped, Pkt, QueueParams, Queues, Scheduler};
use std::collections::VecDeque;

/// The `fifo` scheduler: a queue of class numbers, one entry per queued
/// packet, so packets leave in arrival order whatever their class; plus, per
/// class, the number of stale entries left by packets CoDel dropped.
#[derive(Debug, Default)]
pub struct FifoSched {
    order: VecDeque<u32>,
    skip: Vec<u32>,
}

impl Scheduler for FifoSched {
    fn add_class(&mut self, class: u32, _: &QueueParams) {
        debug_assert_eq!(class as usize, self.skip.len());
        self.skip.push(0);
    }
    #[inline]
    fn enqueued(&mut self, class: u32, _: &Queues) {
        self.order.push_back(class);
    }
    fn dequeue(
        &mut self,
        now: u64,
        qs: &mut Queues,
        drops: &mut Vec<Dropped>,
    ) -> Option<(u32, Pkt, bool)> {
        while let Some(c) = self.order.pop_front() {
            let s = &mut self.skip[c as usize];
            if *s > 0 {
                *s -= 1;
                continue;
            }
            let before = drops.len();
            let got = qs.pop(now, c, drops);
            // Packets of c dropped on the way (CoDel; FQ-style head drops) own entries further on.
            let dropped_here = drops[before..].iter().filter(|d| d.class == c).count() as u32;
            self.skip[c as usize] += dropped_here;
            if let Some((p, mark)) = got {
                return Some((c, p, mark));
            }
        }
        None
    }
    fn is_empty(&self) -> bool {
        self.order.len() as u64 == self.skip.iter().map(|&s| s as u64).sum::<u64>()
    }
}

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
//! 15 ms / tupdate 15 ms (PIE), ECN on. O(1) per packet; an overflow costs a
//! scan of the flows (as Linux and Dummynet do).

use super::{Dropped, Pkt, QueueParams, Queues, Scheduler};
use std::collections::VecDeque;

const NONE: u8 = 0;
const NEW: u8 = 1;
const OLD: u8 = 2;

/// The `fq_codel`/`fq_pie` scheduler (RFC 8290 §4): per flow a deficit in
/// bytes and which list it is on (new, old, none); the new-flows list is
/// always served before the old-flows list. Flows are the scheduler's
/// classes; the AQM runs in [`Queues::pop`].
#[derive(Debug)]
pub struct Fq {
    quantum: i64,
    deficit: Vec<i64>,
    list: Vec<u8>,
    new_flows: VecDeque<u32>,
    old_flows: VecDeque<u32>,
}

impl Fq {
    /// An FQ scheduler whose flows gain `quantum_bytes` per round (RFC 8290's
    /// quantum, default 1514: one MTU-sized frame).
    pub fn new(quantum_bytes: u32) -> Self {
        Fq {
            quantum: quantum_bytes as i64,
            deficit: Vec::new(),
            list: Vec::new(),
            new_flows: VecDeque::new(),
            old_flows: VecDeque::new(),
        }
    }
}

impl Scheduler for Fq {
    fn add_class(&mut self, _class: u32, _: &QueueParams) {
        self.deficit.push(0);
        self.list.push(NONE);
    }
    #[inline]
    fn enqueued(&mut self, c: u32, _: &Queues) {
        if self.list[c as usize] == NONE {
            self.list[c as usize] = NEW;
            self.deficit[c as usize] = self.quantum;
            self.new_flows.push_back(c);
        }
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
            if self.deficit[ci] <= 0 {
                self.deficit[ci] += self.quantum;
                pop_list(self);
                self.old_flows.push_back(c);
                self.list[ci] = OLD;
                continue;
            }
            match qs.pop(now, c, drops) {
                None => {
                    pop_list(self);
                    if from_new {
                        self.old_flows.push_back(c);
                        self.list[ci] = OLD;
                    } else {
                        self.list[ci] = NONE;
                    }
                }
                Some((p, mark)) => {
                    self.deficit[ci] -= p.len_bytes as i64;
                    return Some((c, p, mark));
                }
            }
        }
    }
    fn is_empty(&self) -> bool {
        self.new_flows.is_empty() && self.old_flows.is_empty()
    }
}

//! `rr`: Deficit Round Robin.
//!
//! # Reference
//! M. Shreedhar, G. Varghese, "Efficient Fair Queuing using Deficit Round
//! Robin", SIGCOMM 1995, Figure 3.
//!
//! Backlogged classes form a round-robin list. When a class comes to the
//! head of the list its deficit grows by its quantum Q_i = weight × quantum;
//! it sends head packets while the head fits in the deficit (deficit −= len),
//! then goes to the tail. A class whose queue empties leaves the list and its
//! deficit returns to 0. A class that becomes backlogged joins at the tail.
//! Defaults: quantum 1514 bytes per weight unit (`sched N config type rr
//! quantum B`), weight 1. O(1) per packet when Q_i ≥ the largest packet.

use super::{Dropped, Pkt, QueueParams, Queues, Scheduler};
use std::collections::VecDeque;

/// The `rr` scheduler: the round-robin list of backlogged classes, each
/// with its quantum Q_i = weight × `quantum` bytes and its deficit counter
/// in bytes (0 when the class is off the list; always below Q_i + the
/// largest packet).
#[derive(Debug)]
pub struct Drr {
    quantum_bytes: u32,
    quantum: Vec<i64>,
    deficit: Vec<i64>,
    listed: Vec<bool>,
    active: VecDeque<u32>,
    /// The head of `active` has had its quantum for this visit.
    visiting: bool,
}

impl Drr {
    /// A DRR with `quantum_bytes` per unit of weight per round (`sched N
    /// config type rr quantum B`, default 1514).
    pub fn new(quantum_bytes: u32) -> Self {
        Drr {
            quantum_bytes,
            quantum: Vec::new(),
            deficit: Vec::new(),
            listed: Vec::new(),
            active: VecDeque::new(),
            visiting: false,
        }
    }

    fn leave_head(&mut self, c: u32) {
        self.active.pop_front();
        self.listed[c as usize] = false;
        self.deficit[c as usize] = 0;
        self.visiting = false;
    }
}

impl Scheduler for Drr {
    fn add_class(&mut self, _class: u32, p: &QueueParams) {
        self.quantum
            .push(p.weight.max(1) as i64 * self.quantum_bytes as i64);
        self.deficit.push(0);
        self.listed.push(false);
    }
    #[inline]
    fn enqueued(&mut self, c: u32, _: &Queues) {
        if !self.listed[c as usize] {
            self.listed[c as usize] = true;
            self.active.push_back(c);
        }
    }
    fn dequeue(
        &mut self,
        now: u64,
        qs: &mut Queues,
        drops: &mut Vec<Dropped>,
    ) -> Option<(u32, Pkt, bool)> {
        loop {
            let &c = self.active.front()?;
            let ci = c as usize;
            if !self.visiting {
                self.deficit[ci] += self.quantum[ci];
                self.visiting = true;
            }
            match qs.head_len(c) {
                None => self.leave_head(c),
                Some(len) if len as i64 <= self.deficit[ci] => {
                    let got = qs.pop(now, c, drops);
                    if let Some((p, _)) = got {
                        self.deficit[ci] -= p.len_bytes as i64;
                    }
                    if qs.is_empty(c) {
                        self.leave_head(c);
                    }
                    if let Some((p, mark)) = got {
                        return Some((c, p, mark));
                    }
                }
                Some(_) => {
                    self.active.rotate_left(1);
                    self.visiting = false;
                }
            }
        }
    }
    fn is_empty(&self) -> bool {
        self.active.is_empty()
    }
}

//! `prio`: strict priority.
//!
//! # Reference
//! Strict priority queueing (as Dummynet's `prio` scheduler): the backlogged
//! class with the highest level always sends; classes of the same level take
//! turns packet by packet. A queue's level is its `pri P`, or its `weight`
//! when no `pri` is given (Dummynet reads the weight as the priority), 0..=127;
//! a higher number is served first. Low levels starve while higher ones are
//! backlogged: that is the point. O(1) per packet (a 128-bit map of levels).

use super::{Dropped, Pkt, QueueParams, Queues, Scheduler};
use std::collections::VecDeque;

/// Highest PRIO level (`pri 127`, served first); levels are 0..=MAX_LEVEL,
/// and a weight above it is read as this level.
pub const MAX_LEVEL: u32 = 127;

/// The `prio` scheduler: per level 0..=127 a round-robin list of its
/// backlogged classes, and a 128-bit map of the non-empty levels; dequeue
/// serves the highest set bit's list, one packet per turn.
#[derive(Debug)]
pub struct Prio {
    level: Vec<u8>,
    listed: Vec<bool>,
    levels: Vec<VecDeque<u32>>,
    map: u128,
}

impl Default for Prio {
    fn default() -> Self {
        Prio {
            level: Vec::new(),
            listed: Vec::new(),
            levels: vec![VecDeque::new(); 128],
            map: 0,
        }
    }
}

impl Scheduler for Prio {
    fn add_class(&mut self, _class: u32, p: &QueueParams) {
        self.level.push(p.pri.min(MAX_LEVEL) as u8);
        self.listed.push(false);
    }
    #[inline]
    fn enqueued(&mut self, c: u32, _: &Queues) {
        if !self.listed[c as usize] {
            self.listed[c as usize] = true;
            let l = self.level[c as usize];
            self.levels[l as usize].push_back(c);
            self.map |= 1 << l;
        }
    }
    fn dequeue(
        &mut self,
        now: u64,
        qs: &mut Queues,
        drops: &mut Vec<Dropped>,
    ) -> Option<(u32, Pkt, bool)> {
        while self.map != 0 {
            let l = 127 - self.map.leading_zeros() as usize;
            let list = &mut self.levels[l];
            let c = list.pop_front().expect("a set bit has a class");
            let got = qs.pop(now, c, drops);
            if qs.is_empty(c) {
                self.listed[c as usize] = false;
            } else {
                list.push_back(c);
            }
            if list.is_empty() {
                self.map &= !(1 << l);
            }
            if let Some((p, mark)) = got {
                return Some((c, p, mark));
            }
        }
        None
    }
    fn is_empty(&self) -> bool {
        self.map == 0
    }
}

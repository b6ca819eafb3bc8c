//! `prio`: strict priority, level 0 first, one FIFO per level.
//!
//! # Reference
//! Dummynet's `prio` scheduler (FreeBSD `sys/netpfil/ipfw/dn_sched_prio.c`),
//! rule for rule:
//! - A queue's level is its `weight` (Dummynet's `par[0]`), 0 when the queue
//!   has no `weight` word; **level 0 is served first** (Dummynet takes
//!   `ffs(bitmap)`, the lowest set bit). ipfw's `pri` word sets `par[2]`,
//!   which prio never reads: linkem refuses it rather than ignore it.
//! - One FIFO per level: a packet for level l joins the queue already
//!   backlogged at l (its **owner**), whichever queue it was classified to;
//!   only when no queue of level l holds a packet does the packet's own queue
//!   become the owner. So packets of one level leave in arrival order, and
//!   the owner's limit and AQM decide the packets that join it
//!   ([`Scheduler::class_for`]).
//! - Dequeue: the owner of the lowest backlogged level sends its head; when
//!   it empties, the level is free again.
//!
//! Levels are 0..=[`MAX_LEVEL`] (a 32-bit map: Dummynet's `1 << level` is
//! an `int` shift, so levels above 31 do not work there either; its parser
//! would clamp to 63, linkem's refuses). Low levels starve higher ones while
//! they are backlogged: that is the point. O(1) per packet.

use super::{Dropped, Pkt, QueueParams, Queues, Scheduler};

/// Highest PRIO level (served last); levels are 0..=MAX_LEVEL.
pub const MAX_LEVEL: u32 = 31;

/// The `prio` scheduler: each class's level, per level the class whose FIFO
/// holds that level's packets (its owner, meaningful while the level's bit
/// is set), and the map of backlogged levels (bit l set: level l's owner
/// holds a packet, or held one at its last enqueue and CoDel has not yet
/// found it empty).
#[derive(Debug, Default)]
pub struct Prio {
    level: Vec<u8>,
    owner: [u32; MAX_LEVEL as usize + 1],
    map: u32,
}

impl Scheduler for Prio {
    fn add_class(&mut self, _class: u32, p: &QueueParams) {
        self.level.push(p.pri.min(MAX_LEVEL) as u8);
    }
    #[inline]
    fn class_for(&self, c: u32) -> u32 {
        let l = self.level[c as usize];
        if self.map & (1 << l) != 0 {
            self.owner[l as usize]
        } else {
            c
        }
    }
    #[inline]
    fn enqueued(&mut self, c: u32, _: &Queues) {
        let l = self.level[c as usize];
        if self.map & (1 << l) == 0 {
            self.map |= 1 << l;
            self.owner[l as usize] = c;
        }
    }
    fn dequeue(
        &mut self,
        now: u64,
        qs: &mut Queues,
        drops: &mut Vec<Dropped>,
    ) -> Option<(u32, Pkt, bool)> {
        while self.map != 0 {
            let l = self.map.trailing_zeros();
            let c = self.owner[l as usize];
            let got = qs.pop(now, c, drops);
            if qs.is_empty(c) {
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

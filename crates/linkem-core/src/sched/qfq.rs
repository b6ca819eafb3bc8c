//! `qfq`: Quick Fair Queueing.
//!
//! # Reference
//! F. Checconi, L. Rizzo, P. Valente, "QFQ: Efficient Packet Scheduling with
//! Tight Guarantees", IEEE/ACM ToN 21(3), 2013; Dummynet's `dn_sched_qfq`
//! (same authors) for the parameters and the handling of stale timestamps.
//!
//! # Timestamps
//! Class k has weight w_k and a maximum packet length `lmax_k`; its share of
//! the link is φ_k = w_k / W, W the sum of the weights of every class of the
//! scheduler. Exact timestamps as in WF²Q+: S_k, F_k = S_k + L/w_k for its
//! head of L bytes; after a send S_k = F_k. The system virtual time V grows by
//! L/W per L bytes sent and jumps to the smallest group start when nothing is
//! eligible (so the link never idles with packets waiting).
//!
//! # Groups and slots
//! Class k belongs to group i, the smallest i with σ_i = 2^(MIN_SLOT_SHIFT+i)
//! ≥ lmax_k/w_k (in fixed point): classes of one group have slot sizes within
//! a factor 2. A group keeps its backlogged classes in a bucket list of
//! [`SLOTS`] slots indexed by ⌊S_k/σ_i⌋ relative to the group's front slot,
//! and has approximate timestamps S_i = ⌊S_k/σ_i⌋·σ_i of its front class and
//! F_i = S_i + 2σ_i. Groups are in one of four sets, kept as bitmaps:
//! ER (eligible, ready), IR (ineligible, ready), EB, IB (blocked: a group of
//! higher index in ER finishes earlier, so serving this one first would
//! break the ordering by F). Eligible means S_i ≤ V.
//!
//! Dequeue: the lowest-index group of ER (among ER, the order by index is the
//! order by F_i), its front slot's first class, its head packet. Then
//! V += L/W, the class's timestamps advance, the group moves to its new front
//! slot (and set), groups it blocked are unblocked, and groups whose S_i the
//! new V passed become eligible: all with a constant number of bitmap
//! operations (find-first-set), independent of the number of classes.
//!
//! # Fixed point and limits
//! Timestamps are u64 with [`FRAC_BITS`] fraction bits per byte of weight 1,
//! compared with wrapping arithmetic (a difference below 2⁶³ is ordered), as
//! in the paper. Weights are 1..[`MAX_WEIGHT`]; 1/w_k is stored as
//! `inv_w = 2^FRAC_BITS / w_k` (floored, as Dummynet). `lmax` is 1..65535
//! bytes, default [`DEFAULT_LMAX_BYTES`] (Dummynet's 1500 counts IP bytes;
//! linkem's lengths are frames, so 1500 + the 14-byte Ethernet header).
//!
//! W, as in the paper, Linux's `sch_qfq` and current Dummynet (which keeps
//! `iwsum = 2^30 / W` over the queue instances that exist, updated when one
//! is made or freed; early Dummynet divided by a fixed 2·65536): the sum of
//! the weights of the scheduler's classes, so V keeps pace with the link and
//! the paper's bounds hold with φ_k = w_k/W. Dummynet frees a queue instance
//! some time after it empties, linkem keeps every class of a scheduler
//! instance, so after flows leave W may be larger here than there.
//!
//! Where linkem differs from Dummynet on purpose: lengths and `lmax` are
//! frame bytes (what the link serialises; Dummynet counts IP bytes at layer
//! 3), hence the default 1514; `lmax` may exceed Dummynet's 2000 (jumbo
//! frames), and one out of range is refused where Dummynet clamps it. A
//! packet longer than its queue's `lmax` is still served (its class is kept
//! within the group's slots by clamping), but the guarantee no longer
//! covers it.

use super::{Dropped, Pkt, QueueParams, Queues, Scheduler};

/// Fraction bits of the virtual times.
pub const FRAC_BITS: u32 = 30;
/// Largest weight (Dummynet's QFQ_MAX_WEIGHT).
pub const MAX_WEIGHT: u32 = 1 << 16;
/// Default `lmax`: a full Ethernet frame without FCS.
pub const DEFAULT_LMAX_BYTES: u32 = 1514;
/// Largest `lmax`.
pub const MAX_LMAX_BYTES: u32 = 65535;
/// Slots per group (bits of `full_slots`).
pub const SLOTS: u32 = 32;
/// log2 of the smallest slot: lmax 1 at weight MAX_WEIGHT.
pub const MIN_SLOT_SHIFT: u32 = FRAC_BITS - 16;
/// Highest group index: lmax 65535 at weight 1 needs 2^(FRAC_BITS+16).
pub const MAX_INDEX: u32 = FRAC_BITS + 16 - MIN_SLOT_SHIFT;

const NONE: u32 = u32::MAX;
const ER: usize = 0;
const IR: usize = 1;
const EB: usize = 2;
const IB: usize = 3;

/// a > b for wrapping timestamps.
#[inline]
fn gt(a: u64, b: u64) -> bool {
    (a.wrapping_sub(b) as i64) > 0
}

#[inline]
fn round_down(ts: u64, shift: u32) -> u64 {
    ts & !((1u64 << shift) - 1)
}

/// Lowest set bit of a non-zero bitmap.
#[inline]
fn ffs(b: u64) -> usize {
    b.trailing_zeros() as usize
}

/// Bits at `from` and above.
#[inline]
fn mask_from(b: u64, from: usize) -> u64 {
    if from >= 64 {
        0
    } else {
        b & !((1u64 << from) - 1)
    }
}

/// The group of a class: the smallest i with 2^(MIN_SLOT_SHIFT+i) ≥
/// lmax·inv_w.
pub fn group_index(inv_w: u64, lmax_bytes: u32) -> u32 {
    let slot = (lmax_bytes.max(1) as u64) * inv_w;
    let ceil_log2 = 64 - (slot - 1).leading_zeros();
    ceil_log2.saturating_sub(MIN_SLOT_SHIFT).min(MAX_INDEX)
}

/// `2^FRAC_BITS / w` for a weight clamped to 1..MAX_WEIGHT.
pub fn inv_weight(weight: u32) -> u64 {
    (1u64 << FRAC_BITS) / weight.clamp(1, MAX_WEIGHT) as u64
}

#[derive(Debug, Clone, Copy)]
struct Cls {
    s: u64,
    f: u64,
    inv_w: u64,
    grp: u8,
    /// Next class in the same slot.
    next: u32,
    /// In a slot (backlogged).
    active: bool,
}

#[derive(Debug, Clone)]
struct Group {
    s: u64,
    f: u64,
    shift: u32,
    front: u32,
    /// Bit j: slot (front + j) % SLOTS holds classes.
    full_slots: u32,
    /// First class of each slot's list (pushed at the head, as Dummynet:
    /// the paper lets any class of the front slot go first, and this touches
    /// no other class).
    head: [u32; SLOTS as usize],
}

impl Group {
    fn new(index: u32) -> Self {
        Group {
            s: 0,
            f: 0,
            shift: MIN_SLOT_SHIFT + index,
            front: 0,
            full_slots: 0,
            head: [NONE; SLOTS as usize],
        }
    }
}

/// The `qfq` scheduler: per class its timestamps S_k, F_k and group; per
/// group i (slot size σ_i = 2^(MIN_SLOT_SHIFT+i)) its bucket list of
/// [`SLOTS`] slots and rounded timestamps S_i, F_i = S_i + 2σ_i; the ER, IR,
/// EB, IB bitmaps of groups; V; and W, the sum of all classes' weights.
#[derive(Debug, Clone)]
pub struct Qfq {
    cls: Vec<Cls>,
    groups: Vec<Group>,
    /// ER, IR, EB, IB.
    sets: [u64; 4],
    v: u64,
    /// Sum of the (approximated) weights of all classes.
    wsum: u64,
    /// 2^(FRAC_BITS+32) / wsum: V grows by (L·iwsum) >> 32 per L bytes, a
    /// multiplication instead of a division per packet.
    iwsum: u64,
}

impl Default for Qfq {
    fn default() -> Self {
        Qfq {
            cls: Vec::new(),
            groups: (0..=MAX_INDEX).map(Group::new).collect(),
            sets: [0; 4],
            v: 0,
            wsum: 0,
            iwsum: 0,
        }
    }
}

impl Qfq {
    /// The group index of class `c` (for tests and statistics).
    pub fn class_group(&self, c: u32) -> u32 {
        self.cls[c as usize].grp as u32
    }

    /// The ER, IR, EB, IB bitmaps (for tests).
    pub fn sets(&self) -> [u64; 4] {
        self.sets
    }

    /// Virtual time, in bytes per unit of weight.
    pub fn virtual_time(&self) -> f64 {
        self.v as f64 / (1u64 << FRAC_BITS) as f64
    }

    /// Group state: eligible unless S > V; blocked if the first ER group at or
    /// above this index finishes before it.
    fn calc_state(&self, g: usize) -> usize {
        let grp = &self.groups[g];
        let mut state = if gt(grp.s, self.v) { IR } else { ER };
        let m = mask_from(self.sets[ER], g);
        if m != 0 && gt(grp.f, self.groups[ffs(m)].f) {
            state |= EB;
        }
        state
    }

    #[inline]
    fn move_groups(&mut self, mask: u64, src: usize, dst: usize) {
        self.sets[dst] |= self.sets[src] & mask;
        self.sets[src] &= !mask;
    }

    #[inline]
    fn clear_group(&mut self, g: usize) {
        let bit = !(1u64 << g);
        for s in &mut self.sets {
            *s &= bit;
        }
    }

    /// Group `g`'s finish time was `old_f` and has grown (or it left): groups
    /// of lower index it blocked are released unless a higher ER group still
    /// finishes no later than `old_f`.
    fn unblock_groups(&mut self, g: usize, old_f: u64) {
        let m = mask_from(self.sets[ER], g + 1);
        if m != 0 && !gt(self.groups[ffs(m)].f, old_f) {
            return;
        }
        let below = (1u64 << g) - 1;
        self.move_groups(below, EB, ER);
        self.move_groups(below, IB, IR);
    }

    /// V has grown from `old_v`: an ineligible group's S is the next multiple
    /// of its σ after the old V, so it became eligible iff V crossed a
    /// multiple of its σ, i.e. a bit at or above its slot shift changed.
    fn make_eligible(&mut self, old_v: u64) {
        let vslot = self.v >> MIN_SLOT_SHIFT;
        let old = old_v >> MIN_SLOT_SHIFT;
        if vslot != old {
            let top = 63 - (vslot ^ old).leading_zeros();
            let mask = if top >= 63 {
                u64::MAX
            } else {
                (2u64 << top) - 1
            };
            self.move_groups(mask, IR, ER);
            self.move_groups(mask, IB, EB);
        }
    }

    /// After V jumped: every ineligible group whose S the new V reached moves
    /// to its eligible set (a scan of at most MAX_INDEX+1 groups; jumps happen
    /// only when nothing was eligible).
    fn make_eligible_exact(&mut self) {
        let mut inel = self.sets[IR] | self.sets[IB];
        while inel != 0 {
            let g = ffs(inel);
            inel &= inel - 1;
            if !gt(self.groups[g].s, self.v) {
                let bit = 1u64 << g;
                if self.sets[IR] & bit != 0 {
                    self.move_groups(bit, IR, ER);
                } else {
                    self.move_groups(bit, IB, EB);
                }
            }
        }
    }

    /// With nothing eligible, V jumps to the smallest S of the ineligible
    /// groups (work conservation).
    fn update_eligible(&mut self, old_v: u64) {
        let inel = self.sets[IR] | self.sets[IB];
        if inel == 0 {
            return;
        }
        if self.sets[ER] == 0 {
            let mut b = inel;
            let mut min_s = None::<u64>;
            while b != 0 {
                let g = ffs(b);
                b &= b - 1;
                let s = self.groups[g].s;
                if min_s.is_none_or(|m| gt(m, s)) {
                    min_s = Some(s);
                }
            }
            let s = min_s.expect("an ineligible group");
            if gt(s, self.v) {
                self.v = s;
            }
            self.make_eligible_exact();
        } else {
            self.make_eligible(old_v);
        }
    }

    /// Puts class `c` in the slot of `rounded_s` (relative to the group's
    /// front, clamped to the bucket list: only a packet longer than lmax can
    /// reach the clamp).
    fn slot_insert(&mut self, g: usize, c: u32, rounded_s: u64) {
        let grp = &mut self.groups[g];
        let off = if gt(grp.s, rounded_s) {
            0
        } else {
            (rounded_s.wrapping_sub(grp.s) >> grp.shift).min(SLOTS as u64 - 1) as u32
        };
        let i = ((grp.front + off) % SLOTS) as usize;
        self.cls[c as usize].next = grp.head[i];
        grp.head[i] = c;
        grp.full_slots |= 1 << off;
    }

    /// Removes the first class of the group's front slot.
    fn front_slot_remove(&mut self, g: usize) {
        let grp = &mut self.groups[g];
        let i = grp.front as usize;
        let c = grp.head[i];
        let next = self.cls[c as usize].next;
        grp.head[i] = next;
        if next == NONE {
            grp.full_slots &= !1;
        }
    }

    /// Advances the front to the first full slot; returns its first class.
    fn slot_scan(&mut self, g: usize) -> Option<u32> {
        let grp = &mut self.groups[g];
        if grp.full_slots == 0 {
            return None;
        }
        let i = grp.full_slots.trailing_zeros();
        if i > 0 {
            grp.front = (grp.front + i) % SLOTS;
            grp.full_slots >>= i;
        }
        Some(grp.head[grp.front as usize])
    }

    /// The group's start decreases to `rounded_s`: move the front back so
    /// its classes keep their slots (as far as the bucket list allows).
    fn slot_rotate(&mut self, g: usize, rounded_s: u64) {
        let grp = &mut self.groups[g];
        let want = grp.s.wrapping_sub(rounded_s) >> grp.shift;
        let room = grp.full_slots.leading_zeros() as u64;
        let i = want.min(room) as u32;
        if i > 0 {
            grp.full_slots <<= i;
            grp.front = (grp.front + SLOTS - i % SLOTS) % SLOTS;
        }
        grp.s = grp.s.wrapping_sub((i as u64) << grp.shift);
    }

    /// The start of a class becoming backlogged: its old F if that is still
    /// ahead of V (and not stale), else V, or the finish of the first ER group
    /// at or above its own if that comes earlier than its rounded F (so ER stays
    /// ordered by finish time).
    fn update_start(&mut self, c: usize) {
        let cl = self.cls[c];
        let g = cl.grp as usize;
        let shift = self.groups[g].shift;
        let rounded_f = round_down(cl.f, shift);
        let limit = round_down(self.v, shift).wrapping_add(1u64 << shift);
        let s = if !gt(cl.f, self.v) || gt(rounded_f, limit) {
            let m = mask_from(self.sets[ER], g);
            let next_f = (m != 0).then(|| self.groups[ffs(m)].f);
            match next_f {
                Some(nf) if gt(rounded_f, nf) => nf,
                _ => self.v,
            }
        } else {
            cl.f
        };
        self.cls[c].s = s;
    }

    /// Class `c` has sent its head; `head` is the length of the next one.
    /// Returns whether the group's front changed.
    fn update_class(&mut self, g: usize, c: u32, head: Option<u32>) -> bool {
        let ci = c as usize;
        self.cls[ci].s = self.cls[ci].f;
        match head {
            None => {
                self.cls[ci].active = false;
                self.front_slot_remove(g);
            }
            Some(len) => {
                let cl = &mut self.cls[ci];
                cl.f = cl.s.wrapping_add(len as u64 * cl.inv_w);
                let rounded_s = round_down(cl.s, self.groups[g].shift);
                if rounded_s == self.groups[g].s {
                    return false;
                }
                self.front_slot_remove(g);
                self.slot_insert(g, c, rounded_s);
            }
        }
        true
    }

    /// Checks the paper's invariants (for tests): each backlogged group is in
    /// exactly one set and eligible exactly when S ≤ V, and every active class
    /// is listed once.
    pub fn check_invariants(&self) -> Result<(), String> {
        let all = self.sets[ER] | self.sets[IR] | self.sets[EB] | self.sets[IB];
        let pop: u32 = self.sets.iter().map(|s| s.count_ones()).sum();
        if pop != all.count_ones() {
            return Err(format!("a group is in two sets: {:?}", self.sets));
        }
        let mut listed = 0usize;
        for (gi, g) in self.groups.iter().enumerate() {
            let bit = 1u64 << gi;
            if (g.full_slots != 0) != (all & bit != 0) {
                return Err(format!(
                    "group {gi}: slots {:#x} sets {all:#x}",
                    g.full_slots
                ));
            }
            if g.full_slots == 0 {
                continue;
            }
            let eligible = (self.sets[ER] | self.sets[EB]) & bit != 0;
            if eligible == gt(g.s, self.v) {
                return Err(format!(
                    "group {gi}: eligible {eligible} but S {} V {}",
                    g.s, self.v
                ));
            }
            if g.f != g.s.wrapping_add(2u64 << g.shift) {
                return Err(format!("group {gi}: F is not S + 2σ"));
            }
            for j in 0..SLOTS {
                let i = ((g.front + j) % SLOTS) as usize;
                let full = g.full_slots & (1 << j) != 0;
                if full != (g.head[i] != NONE) {
                    return Err(format!("group {gi}: slot {j} bit {full}"));
                }
                let mut c = g.head[i];
                while c != NONE {
                    listed += 1;
                    let cl = &self.cls[c as usize];
                    if !cl.active || cl.grp as usize != gi {
                        return Err(format!("class {c} listed in group {gi}"));
                    }
                    c = cl.next;
                }
            }
            let front = g.head[g.front as usize];
            if front != NONE && round_down(self.cls[front as usize].s, g.shift) != g.s {
                return Err(format!("group {gi}: S is not its front class's"));
            }
        }
        let active = self.cls.iter().filter(|c| c.active).count();
        if listed != active {
            return Err(format!("{listed} listed, {active} active"));
        }
        Ok(())
    }
}

impl Scheduler for Qfq {
    fn add_class(&mut self, _class: u32, p: &QueueParams) {
        let inv_w = inv_weight(p.weight);
        self.wsum += (1u64 << FRAC_BITS) / inv_w;
        self.iwsum = (1u64 << (FRAC_BITS + 32)) / self.wsum;
        self.cls.push(Cls {
            s: self.v,
            f: self.v,
            inv_w,
            grp: group_index(inv_w, p.lmax_bytes.unwrap_or(DEFAULT_LMAX_BYTES)) as u8,
            next: NONE,
            active: false,
        });
    }

    fn enqueued(&mut self, c: u32, qs: &Queues) {
        let ci = c as usize;
        if self.cls[ci].active {
            return;
        }
        let len = qs.head_len(c).expect("a packet was just queued");
        self.cls[ci].active = true;
        let g = self.cls[ci].grp as usize;
        self.update_start(ci);
        let cl = &mut self.cls[ci];
        cl.f = cl.s.wrapping_add(len as u64 * cl.inv_w);
        let s = cl.s;
        let shift = self.groups[g].shift;
        let rounded_s = round_down(s, shift);
        if self.groups[g].full_slots != 0 {
            if !gt(self.groups[g].s, s) {
                self.slot_insert(g, c, rounded_s);
                return;
            }
            // The group's start decreases: it was ineligible (its S > this
            // class's S ≥ V); re-rank it.
            self.slot_rotate(g, rounded_s);
            self.clear_group(g);
        } else if self.sets[ER] == 0 && gt(rounded_s, self.v) {
            self.v = rounded_s;
            self.make_eligible_exact();
        }
        let grp = &mut self.groups[g];
        if grp.full_slots == 0 {
            grp.s = rounded_s;
        }
        grp.f = grp.s.wrapping_add(2u64 << shift);
        let st = self.calc_state(g);
        self.sets[st] |= 1 << g;
        self.slot_insert(g, c, rounded_s);
    }

    fn dequeue(
        &mut self,
        now: u64,
        qs: &mut Queues,
        drops: &mut Vec<Dropped>,
    ) -> Option<(u32, Pkt, bool)> {
        loop {
            if self.sets[ER] == 0 {
                // Only an ER group can block: with none, nothing is blocked
                // (a safety net; the paper's invariants leave nothing here).
                self.move_groups(u64::MAX, EB, ER);
                self.move_groups(u64::MAX, IB, IR);
                self.update_eligible(self.v);
                if self.sets[ER] == 0 {
                    return None;
                }
            }
            let g = ffs(self.sets[ER]);
            let c = self.groups[g].head[self.groups[g].front as usize];
            let got = qs.pop(now, c, drops);
            let old_v = self.v;
            if let Some((p, _)) = got {
                let dv = (p.len_bytes as u128 * self.iwsum as u128) >> 32;
                self.v = self.v.wrapping_add(dv as u64);
            }
            if self.update_class(g, c, qs.head_len(c)) {
                let old_f = self.groups[g].f;
                // The group left, or its front (so its F) moved on: groups it
                // blocked may go. Same front: nothing changed for them.
                let moved = match self.slot_scan(g) {
                    None => {
                        self.sets[ER] &= !(1u64 << g);
                        true
                    }
                    Some(front) => {
                        let shift = self.groups[g].shift;
                        let rounded_s = round_down(self.cls[front as usize].s, shift);
                        let moved = self.groups[g].s != rounded_s;
                        if moved {
                            let grp = &mut self.groups[g];
                            grp.s = rounded_s;
                            grp.f = rounded_s.wrapping_add(2u64 << shift);
                            self.sets[ER] &= !(1u64 << g);
                            let st = self.calc_state(g);
                            self.sets[st] |= 1 << g;
                        }
                        moved
                    }
                };
                if moved {
                    self.unblock_groups(g, old_f);
                }
            }
            self.update_eligible(old_v);
            if let Some((p, mark)) = got {
                return Some((c, p, mark));
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.sets.iter().all(|&s| s == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aqm::AqmState;
    use crate::sched::{Class, ClassStats, Fifo};
    use std::sync::Arc;

    fn mk(classes: &[(u32, Option<u32>)]) -> (Qfq, Queues) {
        mk_at(0, classes)
    }

    /// A scheduler whose virtual time starts at `v0`.
    fn mk_at(v0: u64, classes: &[(u32, Option<u32>)]) -> (Qfq, Queues) {
        let mut q = Qfq {
            v: v0,
            ..Default::default()
        };
        let mut qs = Queues::default();
        for (i, &(weight, lmax_bytes)) in classes.iter().enumerate() {
            let p = Arc::new(QueueParams {
                weight,
                lmax_bytes,
                limit_packets: None,
                ..Default::default()
            });
            q.add_class(i as u32, &p);
            qs.classes.push(Class {
                fifo: Fifo::default(),
                aqm: AqmState::new(&p.aqm),
                params: p,
                stats: ClassStats::default(),
                queue: i as u32,
                flow_id: 0,
            });
        }
        (q, qs)
    }

    fn enq(q: &mut Qfq, qs: &mut Queues, c: u32, len: u32, handle: u32) {
        let p = Pkt {
            handle,
            len_bytes: len,
            enq_ns: 0,
            ect: false,
            ce: false,
        };
        qs.push(0, c, p, (0, 0), &mut || 0.5).unwrap();
        q.enqueued(c, qs);
        q.check_invariants().unwrap();
    }

    fn deq(q: &mut Qfq, qs: &mut Queues) -> Option<(u32, Pkt)> {
        let got = q.dequeue(0, qs, &mut Vec::new()).map(|(c, p, _)| (c, p));
        q.check_invariants().unwrap();
        got
    }

    /// A tiny deterministic generator (the tests need no statistics).
    fn lcg(x: &mut u64) -> u64 {
        *x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *x >> 33
    }

    #[test]
    fn group_index_is_the_smallest_slot_holding_lmax_over_w() {
        // σ_i = 2^(14+i) in units of 2^-30 byte per weight.
        assert_eq!(group_index(inv_weight(MAX_WEIGHT), 1), 0);
        assert_eq!(group_index(inv_weight(1), 1024), 26); // 2^40 exactly
        assert_eq!(group_index(inv_weight(1), 1025), 27);
        assert_eq!(group_index(inv_weight(1), 1514), 27);
        assert_eq!(group_index(inv_weight(1), MAX_LMAX_BYTES), MAX_INDEX);
        assert_eq!(group_index(inv_weight(2), 1514), 26);
        assert_eq!(group_index(inv_weight(64), 1514), 21);
        assert_eq!(group_index(inv_weight(0), 1514), 27, "weight 0 is 1");
        for w in [1u32, 3, 7, 100, 1000, 65536] {
            for l in [1u32, 64, 1500, 1514, 9000, 65535] {
                let i = group_index(inv_weight(w), l);
                let slot = l as u64 * inv_weight(w);
                assert!(1u64 << (MIN_SLOT_SHIFT + i) >= slot, "w {w} l {l}");
                assert!(
                    i == 0 || 1u64 << (MIN_SLOT_SHIFT + i - 1) < slot,
                    "w {w} l {l}"
                );
            }
        }
    }

    #[test]
    fn single_flow_gets_every_service_in_order() {
        let (mut q, mut qs) = mk(&[(5, None)]);
        for h in 0..200 {
            enq(&mut q, &mut qs, 0, 64 + (h * 37) % 1450, h);
        }
        for h in 0..200 {
            assert_eq!(deq(&mut q, &mut qs).map(|(_, p)| p.handle), Some(h));
        }
        assert!(deq(&mut q, &mut qs).is_none());
        assert!(q.is_empty());
        assert_eq!(q.sets(), [0; 4]);
    }

    #[test]
    fn empty_and_refill_keep_serving() {
        let (mut q, mut qs) = mk(&[(1, None), (4, Some(512)), (100, Some(9000))]);
        let mut h = 0;
        for round in 0..50u32 {
            let n = 1 + round % 7;
            for k in 0..n {
                let c = (round + k) % 3;
                enq(&mut q, &mut qs, c, 100 + (h * 13) % 400, h);
                h += 1;
            }
            // Drain fully every other round, partly otherwise.
            let take = if round % 2 == 0 { n } else { n / 2 };
            for _ in 0..take {
                assert!(deq(&mut q, &mut qs).is_some(), "round {round}");
            }
        }
        while deq(&mut q, &mut qs).is_some() {}
        assert_eq!(qs.total_packets, 0);
        assert_eq!(q.sets(), [0; 4]);
        // After V moved on, a refill is served at once.
        enq(&mut q, &mut qs, 2, 1500, 9999);
        assert_eq!(q.sets()[ER], 1 << q.class_group(2));
        assert_eq!(deq(&mut q, &mut qs).map(|(c, _)| c), Some(2));
    }

    #[test]
    fn random_operations_keep_the_bitmaps_consistent() {
        // Mixed groups (weights 1..4, lmax 64 or 1514) under load that comes
        // and goes; every operation is followed by the invariant check.
        let ws: Vec<(u32, Option<u32>)> = (0..8)
            .map(|i| ([1, 2, 3, 4][i % 4], Some([64, 1514][i % 2])))
            .collect();
        let (mut q, mut qs) = mk(&ws);
        let mut x = 8u64;
        let mut seen = [0u32; 4];
        let (mut sent, mut queued) = (0u32, 0u32);
        for h in 0..40_000u32 {
            if lcg(&mut x) % 100 < 58 {
                let c = (lcg(&mut x) % 8) as u32;
                let lmax = ws[c as usize].1.unwrap();
                enq(&mut q, &mut qs, c, 1 + (lcg(&mut x) as u32) % lmax, h);
                queued += 1;
            } else if deq(&mut q, &mut qs).is_some() {
                sent += 1;
            } else {
                assert_eq!(qs.total_packets, 0, "idle with packets waiting");
            }
            for (s, b) in seen.iter_mut().zip(q.sets()) {
                *s += (b != 0) as u32;
            }
        }
        assert!(seen[ER] > 0 && seen[IR] > 0, "{seen:?}");
        assert!(seen[EB] + seen[IB] > 0, "a group was blocked: {seen:?}");
        while deq(&mut q, &mut qs).is_some() {
            sent += 1;
        }
        assert_eq!(sent, queued);
    }

    #[test]
    fn weights_share_the_service() {
        let (mut q, mut qs) = mk(&[(1, None), (3, None)]);
        let mut h = 0;
        for _ in 0..50 {
            for c in 0..2 {
                enq(&mut q, &mut qs, c, 1000, h);
                h += 1;
            }
        }
        let mut n = [0u32; 2];
        for _ in 0..40_000 {
            let (c, _) = deq(&mut q, &mut qs).expect("backlogged");
            n[c as usize] += 1;
            enq(&mut q, &mut qs, c, 1000, h);
            h += 1;
        }
        // 1:3 within a few packets (QFQ's lag is a few lmax).
        assert!((n[0] as i64 - 10_000).abs() <= 8, "{n:?}");
    }

    #[test]
    fn random_lengths_past_lmax_never_stall() {
        let ws: Vec<(u32, Option<u32>)> = (0..12)
            .map(|i| ([1, 65536, 3, 200][i % 4], Some([1, 64, 1514][i % 3])))
            .collect();
        let (mut q, mut qs) = mk(&ws);
        let mut x = 5u64;
        let (mut sent, mut queued) = (0u32, 0u32);
        for h in 0..30_000u32 {
            if lcg(&mut x) % 100 < 55 {
                let c = (lcg(&mut x) % 12) as u32;
                qs.push(
                    0,
                    c,
                    Pkt {
                        handle: h,
                        len_bytes: 1 + (lcg(&mut x) % 9000) as u32,
                        enq_ns: 0,
                        ect: false,
                        ce: false,
                    },
                    (0, 0),
                    &mut || 0.5,
                )
                .unwrap();
                q.enqueued(c, &qs);
                queued += 1;
            } else if q.dequeue(0, &mut qs, &mut Vec::new()).is_some() {
                sent += 1;
            } else {
                assert_eq!(qs.total_packets, 0, "idle with packets waiting");
            }
        }
        while q.dequeue(0, &mut qs, &mut Vec::new()).is_some() {
            sent += 1;
        }
        assert_eq!(sent, queued);
        assert!(q.is_empty());
    }

    #[test]
    fn virtual_time_wraps_around() {
        // V starts 2^36 units (64 bytes at weight 1) before u64 wraps.
        let (mut q, mut qs) = mk_at(u64::MAX - (1 << 36), &[(1, None), (3, None), (2, Some(64))]);
        let mut h = 0;
        for c in 0..3 {
            for _ in 0..20 {
                enq(&mut q, &mut qs, c, if c == 2 { 64 } else { 1000 }, h);
                h += 1;
            }
        }
        let mut bytes = [0u64; 3];
        for _ in 0..30_000 {
            let (c, p) = deq(&mut q, &mut qs).expect("backlogged");
            bytes[c as usize] += p.len_bytes as u64;
            enq(&mut q, &mut qs, c, p.len_bytes, h);
            h += 1;
        }
        assert!(q.v < 1 << 62, "V wrapped");
        let tot = bytes.iter().sum::<u64>() as f64;
        for (c, w) in [1.0, 3.0, 2.0].iter().enumerate() {
            assert!((bytes[c] as f64 / tot - w / 6.0).abs() < 0.005, "{bytes:?}");
        }
    }

    #[test]
    fn packets_longer_than_lmax_are_still_served() {
        let (mut q, mut qs) = mk(&[(1, Some(64)), (50, Some(64)), (7, None)]);
        let mut h = 0;
        for _ in 0..300 {
            for c in 0..3 {
                enq(&mut q, &mut qs, c, 9000 - 100 * c, h);
                h += 1;
            }
        }
        let mut n = 0;
        while q.dequeue(0, &mut qs, &mut Vec::new()).is_some() {
            n += 1;
        }
        assert_eq!(n, 900);
        assert!(q.is_empty());
    }
}

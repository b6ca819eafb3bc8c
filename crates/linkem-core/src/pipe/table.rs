//! The flow-instance table: the dynamic instances of a masked pipe
//! ([`super::Pipe`]) or of a masked scheduler
//! ([`crate::sched::service::SchedPipe`]), one per masked flow key, made at
//! the flow's first packet and removed once idle.
//!
//! # Structure
//! - A slab `slots` (`Vec<Option<T>>`) with a free list: an instance keeps its
//!   slot from its creation to its removal or the next compaction; a removed
//!   instance's slot is reused by the next one made.
//! - An index from [`MaskedKey`] to slot ([`SlotIndex`]): [`FlowIndex`], the
//!   tag table on a masked pipe's per-packet path, or [`MapIndex`], a hash map,
//!   for scheduler instances.
//! - An expiry min-heap of `(t, slot)`.
//!
//! # Invariants
//! - The index holds exactly the live slots, and the heap holds exactly one
//!   entry per live slot (so entries are distinct and the order in which they
//!   leave the heap depends only on which entries it holds).
//! - An entry's `t` is never later than the instance's idle instant: it is the
//!   instant the instance was made, or an idle instant seen at an earlier check.
//!   An entry is stale once the instance has been used since; it is refreshed
//!   only when it reaches the top.
//! - Charges: an instance is made only if the node's [`FlowBudget`] admits its
//!   charge (`instance_bytes`) plus `first_use_bytes` (what its first packet
//!   makes inside it, a scheduler's first class); it is charged
//!   `instance_bytes` and counted in `FlowBudget::live`. What an instance
//!   makes inside itself later is charged by its owner and reported with
//!   [`FlowTable::add_charged_bytes`]. [`FlowTable::charged_bytes`] is the sum,
//!   over live instances, of `instance_bytes` + [`Flow::inner_charged_bytes`],
//!   and exactly that goes back to the budget when they are removed.
//!
//! # Expiry
//! With `hold` the budget's [`FlowBudget::idle_hold_ns`], a check at `now`
//! ([`FlowTable::expire`]) looks at the top entry `(t, s)` while
//! `t + hold < now`: the instance says since when it is idle
//! ([`Flow::idle_since_ns`], `now` while it is busy); if that instant `i` has
//! `i + hold < now` the instance is removed (its slot freed, its charge and
//! count given back), otherwise the entry is re-keyed in place to `(i, s)`
//! (one sift down). Each re-key moves an entry past a use of its instance, so
//! a check costs O(log n) amortised per use, whatever the number of instances.
//!
//! # Compaction
//! After a check that removed instances, when there are at least 64 slots and
//! at most a quarter of them are live, the live instances move to the first
//! slots in slot order, and the index and heap are rebuilt for them at their
//! size: O(live), paid for by the three quarters of the slots removed since the
//! last compaction (or growth), so O(1) amortised per removal; the memory of
//! removed instances goes back. The relative slot order, and so the order of
//! [`FlowTable::iter`] (the order listings and statistics show flows in), is
//! kept; only slot numbers change, and [`FlowTable::expire`] says when.

use super::{FlowBudget, KeyHasher, MaskedKey};
use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, HashMap};
use std::hash::BuildHasherDefault;

/// What the table needs of an instance.
pub trait Flow {
    /// The masked flow key the instance serves.
    fn key(&self) -> &MaskedKey;
    /// The instant from which the instance is idle (nothing queued, on the
    /// wire or unreleased), seen at `now_ns`: `now_ns` or later while it is busy.
    fn idle_since_ns(&self, now_ns: u64) -> u64;
    /// Bytes its owner charged to the budget for what the instance made inside
    /// itself (a scheduler's classes); they go back with the instance.
    fn inner_charged_bytes(&self) -> usize {
        0
    }
}

/// An index from masked key to slot.
pub trait SlotIndex: Default + std::fmt::Debug {
    /// Bytes one entry takes at the index's emptiest, for charges.
    fn entry_bytes() -> usize;
    /// The slot filed under `key`; `is_key(slot)` confirms a candidate whose
    /// key the index does not keep.
    fn find(&self, key: &MaskedKey, is_key: impl FnMut(u32) -> bool) -> Option<u32>;
    /// Files `slot` under `key` (not filed yet).
    fn insert(&mut self, key: &MaskedKey, slot: u32);
    /// Removes the entry of `slot` filed under `key`.
    fn remove(&mut self, key: &MaskedKey, slot: u32);
    /// Entries filed.
    fn len(&self) -> usize;
    /// No entry filed.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a check ([`FlowTable::expire`]) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expired {
    /// Instances removed.
    pub removed: u64,
    /// The table was compacted: slot numbers changed.
    pub compacted: bool,
}

/// The dynamic instances of one masked pipe or scheduler (see the module doc).
#[derive(Debug)]
pub struct FlowTable<T, I = FlowIndex> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
    index: I,
    expiry: BinaryHeap<Reverse<(u64, u32)>>,
    instance_bytes: usize,
    first_use_bytes: usize,
    charged_bytes: usize,
}

impl<T: Flow, I: SlotIndex> FlowTable<T, I> {
    /// An empty table whose instances are charged `instance_bytes` each and
    /// made only if `first_use_bytes` more fit the budget too.
    pub fn new(instance_bytes: usize, first_use_bytes: usize) -> Self {
        FlowTable {
            slots: Vec::new(),
            free: Vec::new(),
            index: I::default(),
            expiry: BinaryHeap::new(),
            instance_bytes,
            first_use_bytes,
            charged_bytes: 0,
        }
    }

    /// Bytes one live instance holds in the table, from type sizes: its slot,
    /// its index entry at the index's emptiest and its heap entry.
    pub fn slot_bytes() -> usize {
        std::mem::size_of::<Option<T>>()
            + I::entry_bytes()
            + std::mem::size_of::<Reverse<(u64, u32)>>()
    }

    /// Live instances.
    #[inline]
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// No live instance.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes charged to the budget for the live instances (see the module doc).
    pub fn charged_bytes(&self) -> usize {
        self.charged_bytes
    }

    /// Records `bytes` the owner charged to the budget for what an instance
    /// made inside itself (the instance's [`Flow::inner_charged_bytes`] grew
    /// by as much).
    pub fn add_charged_bytes(&mut self, bytes: usize) {
        self.charged_bytes += bytes;
    }

    /// The instance for `key` with its slot, made by `make` at `now_ns` if
    /// there is none; `None` when there is none and `budget` admits no more.
    #[inline]
    pub fn get_or_insert(
        &mut self,
        key: &MaskedKey,
        now_ns: u64,
        budget: &mut FlowBudget,
        make: impl FnOnce() -> T,
    ) -> Option<(u32, &mut T)> {
        let slots = &self.slots;
        let found = self.index.find(key, |s| {
            slots[s as usize].as_ref().is_some_and(|f| f.key() == key)
        });
        let slot = match found {
            Some(s) => s,
            None => {
                if !budget.admits_instance(self.instance_bytes + self.first_use_bytes) {
                    return None;
                }
                let f = make();
                let s = match self.free.pop() {
                    Some(s) => {
                        self.slots[s as usize] = Some(f);
                        s
                    }
                    None => {
                        self.slots.push(Some(f));
                        (self.slots.len() - 1) as u32
                    }
                };
                self.index.insert(key, s);
                self.expiry.push(Reverse((now_ns, s)));
                budget.live += 1;
                budget.bytes += self.instance_bytes;
                self.charged_bytes += self.instance_bytes;
                s
            }
        };
        let f = self.slots[slot as usize]
            .as_mut()
            .expect("indexed slots are live");
        Some((slot, f))
    }

    /// The instance in `slot`.
    #[inline]
    pub fn get(&self, slot: u32) -> Option<&T> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    /// The instance in `slot`, to change.
    #[inline]
    pub fn get_mut(&mut self, slot: u32) -> Option<&mut T> {
        self.slots.get_mut(slot as usize).and_then(Option::as_mut)
    }

    /// The live instances with their slots, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(s, f)| f.as_ref().map(|f| (s as u32, f)))
    }

    /// The live instances, in slot order, to change.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().flatten()
    }

    /// Removes the instances idle for longer than the budget's hold at
    /// `now_ns`, giving their charges and count back to `budget` and handing
    /// each to `gone`; then compacts if at most a quarter of the slots stay
    /// live (see the module doc).
    pub fn expire(
        &mut self,
        now_ns: u64,
        budget: &mut FlowBudget,
        mut gone: impl FnMut(T),
    ) -> Expired {
        let hold_ns = budget.idle_hold_ns;
        let mut removed = 0;
        while let Some(mut top) = self.expiry.peek_mut() {
            let Reverse((at, slot)) = *top;
            if at.saturating_add(hold_ns) >= now_ns {
                break;
            }
            let f = self.slots[slot as usize]
                .as_ref()
                .expect("one heap entry per live slot");
            let idle_ns = f.idle_since_ns(now_ns);
            if idle_ns.saturating_add(hold_ns) >= now_ns {
                // Re-keyed in place: one sift down instead of a pop (down to
                // the bottom and back up) and a push; the heap holds the same
                // entries either way, so the pop order is the same.
                *top = Reverse((idle_ns, slot));
                continue;
            }
            PeekMut::pop(top);
            let f = self.slots[slot as usize].take().expect("checked above");
            self.index.remove(f.key(), slot);
            self.free.push(slot);
            let freed = self.instance_bytes + f.inner_charged_bytes();
            budget.live -= 1;
            budget.bytes -= freed;
            self.charged_bytes -= freed;
            removed += 1;
            gone(f);
        }
        let compacted =
            removed > 0 && self.slots.len() >= 64 && self.index.len() * 4 <= self.slots.len();
        if compacted {
            self.compact();
        }
        Expired { removed, compacted }
    }

    fn compact(&mut self) {
        let mut new_slot = vec![u32::MAX; self.slots.len()];
        let mut slots = Vec::with_capacity(self.index.len());
        for (old, f) in std::mem::take(&mut self.slots).into_iter().enumerate() {
            if let Some(f) = f {
                new_slot[old] = slots.len() as u32;
                slots.push(Some(f));
            }
        }
        self.index = I::default();
        for (s, f) in slots.iter().enumerate() {
            let f = f.as_ref().expect("only live slots were kept");
            self.index.insert(f.key(), s as u32);
        }
        let heap: Vec<_> = std::mem::take(&mut self.expiry)
            .into_iter()
            .map(|Reverse((at, s))| Reverse((at, new_slot[s as usize])))
            .collect();
        self.expiry = BinaryHeap::from(heap);
        self.slots = slots;
        self.free = Vec::new();
    }
}

/// The index from a masked key to its instance's slot: open addressing with
/// linear probing over 8-byte entries `tag << 32 | (slot + 1)` (0: empty),
/// where `tag` is the top 32 bits of [`MaskedKey::index_hash`] and also picks
/// the home bucket (`tag & mask`), so the table grows without the keys.
///
/// Hand-written because it is on every packet's path: a lookup reads one
/// cache line of the table (8 entries) and then the instance, whose key
/// confirms the match; a general map reads a control group and a separate
/// bucket holding the 48-byte key. At most 7/8 full: a hit then probes 4.5
/// entries on average, still one or two lines, and the table is half the size
/// it would be at 3/4 for some counts (100 000 flows: 1 MB instead of 2), which
/// keeps more of it in the last-level cache, where its misses come from.
/// Deletion shifts the following entries back (no tombstones), so lookups stay
/// short under churn.
#[derive(Debug, Default)]
pub struct FlowIndex {
    table: Vec<u64>,
    len: usize,
}

impl FlowIndex {
    #[inline]
    fn home(&self, tag: u64) -> usize {
        tag as usize & (self.table.len() - 1)
    }

    /// The slot filed under `hash` for which `is_key(slot)` holds.
    #[inline]
    fn find_hash(&self, hash: u64, mut is_key: impl FnMut(u32) -> bool) -> Option<u32> {
        if self.table.is_empty() {
            return None;
        }
        let tag = hash >> 32;
        let mask = self.table.len() - 1;
        let mut i = self.home(tag);
        loop {
            let e = self.table[i];
            if e == 0 {
                return None;
            }
            if e >> 32 == tag {
                let slot = (e as u32).wrapping_sub(1);
                if is_key(slot) {
                    return Some(slot);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Files `slot` under `hash` (the key must not be filed yet).
    fn insert_hash(&mut self, hash: u64, slot: u32) {
        debug_assert!(slot < u32::MAX);
        if (self.len + 1) * 8 > self.table.len() * 7 {
            self.grow();
        }
        self.place((hash >> 32) << 32 | (slot as u64 + 1));
        self.len += 1;
    }

    fn place(&mut self, entry: u64) {
        let mask = self.table.len() - 1;
        let mut i = self.home(entry >> 32);
        while self.table[i] != 0 {
            i = (i + 1) & mask;
        }
        self.table[i] = entry;
    }

    fn grow(&mut self) {
        let size = (self.table.len() * 2).max(16);
        let old = std::mem::replace(&mut self.table, vec![0; size]);
        for e in old.into_iter().filter(|&e| e != 0) {
            self.place(e);
        }
    }

    /// Removes the entry of `slot` filed under `hash`.
    fn remove_hash(&mut self, hash: u64, slot: u32) {
        let want = (hash >> 32) << 32 | (slot as u64 + 1);
        let mask = self.table.len() - 1;
        let mut i = self.home(hash >> 32);
        while self.table[i] != want {
            debug_assert!(self.table[i] != 0, "removing an entry that is not filed");
            i = (i + 1) & mask;
        }
        // Backward shift: move up every following entry whose home is not in
        // (i, j], so that no probe sequence crosses an empty bucket it did not
        // cross before.
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let e = self.table[j];
            if e == 0 {
                break;
            }
            let k = self.home(e >> 32);
            let stays = if i <= j {
                i < k && k <= j
            } else {
                i < k || k <= j
            };
            if !stays {
                self.table[i] = e;
                i = j;
            }
        }
        self.table[i] = 0;
        self.len -= 1;
    }
}

impl SlotIndex for FlowIndex {
    /// 8 bytes at 7/16 full, the emptiest after a growth.
    fn entry_bytes() -> usize {
        8 * 16 / 7
    }
    #[inline]
    fn find(&self, key: &MaskedKey, is_key: impl FnMut(u32) -> bool) -> Option<u32> {
        self.find_hash(key.index_hash(), is_key)
    }
    fn insert(&mut self, key: &MaskedKey, slot: u32) {
        self.insert_hash(key.index_hash(), slot)
    }
    fn remove(&mut self, key: &MaskedKey, slot: u32) {
        self.remove_hash(key.index_hash(), slot)
    }
    #[inline]
    fn len(&self) -> usize {
        self.len
    }
}

/// A hash map from key to slot: the index of scheduler instances, whose
/// lookup is not what their per-packet cost is made of.
#[derive(Debug, Default)]
pub struct MapIndex(HashMap<MaskedKey, u32, BuildHasherDefault<KeyHasher>>);

impl SlotIndex for MapIndex {
    /// The entry and its control byte at 7/8 full.
    fn entry_bytes() -> usize {
        (std::mem::size_of::<(MaskedKey, u32)>() + 1) * 8 / 7
    }
    fn find(&self, key: &MaskedKey, _is_key: impl FnMut(u32) -> bool) -> Option<u32> {
        self.0.get(key).copied()
    }
    fn insert(&mut self, key: &MaskedKey, slot: u32) {
        self.0.insert(*key, slot);
    }
    fn remove(&mut self, key: &MaskedKey, _slot: u32) {
        self.0.remove(key);
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipe::mix;

    /// The flow index against a map, under churn with colliding home buckets
    /// (hashes that differ only above the table's mask) and equal tags.
    #[test]
    fn flow_index_finds_what_a_map_finds_under_churn() {
        let mut idx = FlowIndex::default();
        let mut reference = std::collections::HashMap::new();
        let mut x = 0x1234_5678_9abc_def0u64;
        for round in 0..20_000u32 {
            x = mix(x);
            // 300 keys; hashes share their low home bits often, and keys 2k
            // and 2k+1 share the whole tag, so the slot check must tell them apart.
            let key = (x % 300) as u32;
            let hash = ((key / 2) as u64 % 37) << 32 | ((key as u64 / 2) << 40) | 0xdead;
            let found = idx.find_hash(hash, |s| reference.get(&key) == Some(&s));
            assert_eq!(
                found,
                reference.get(&key).copied(),
                "round {round} key {key}"
            );
            match found {
                Some(s) if x & 1 == 0 => {
                    idx.remove_hash(hash, s);
                    reference.remove(&key);
                }
                None => {
                    idx.insert_hash(hash, key + 7);
                    reference.insert(key, key + 7);
                }
                _ => {}
            }
            assert_eq!(idx.len(), reference.len());
        }
    }

    /// A flow that is busy until `idle_at_ns` and holds `inner` charged bytes.
    #[derive(Debug)]
    struct Toy {
        key: MaskedKey,
        idle_at_ns: u64,
        inner: usize,
    }

    impl Flow for Toy {
        fn key(&self) -> &MaskedKey {
            &self.key
        }
        fn idle_since_ns(&self, now_ns: u64) -> u64 {
            self.idle_at_ns.max(now_ns * u64::from(self.inner == 1))
        }
        fn inner_charged_bytes(&self) -> usize {
            self.inner
        }
    }

    fn key(n: u32) -> MaskedKey {
        MaskedKey {
            ip_version: 4,
            src_ip: n as u128,
            ..Default::default()
        }
    }

    /// Under random churn the table keeps exactly the flows a plain map says
    /// are live (removed at the first check more than a hold after their idle
    /// instant), keeps their order across removals and compactions, and its
    /// charge and the budget are the sums over them.
    fn churn<I: SlotIndex>() {
        let mut table: FlowTable<Toy, I> = FlowTable::new(100, 10);
        let mut budget = FlowBudget {
            idle_hold_ns: 5000,
            max: 150,
            ..Default::default()
        };
        // key -> (idle instant, inner bytes); the order of making.
        let mut model: std::collections::BTreeMap<u32, (u64, usize)> = Default::default();
        let mut x = 0x5eed_u64;
        let mut now = 0u64;
        let (mut compactions, mut refused) = (0, 0);
        for round in 0..40_000u32 {
            x = mix(x);
            now += x % 40;
            // Bursts over many keys, then quiet phases over few, so that
            // most slots empty at times and compaction runs.
            let keys = if (round / 2000) % 2 == 0 { 400 } else { 8 };
            let k = ((x >> 20) % keys) as u32;
            let order_before: Vec<u32> = table.iter().map(|(_, f)| f.key.src_ip as u32).collect();
            let mut gone = Vec::new();
            let done = table.expire(now, &mut budget, |f| gone.push(f.key.src_ip as u32));
            let mut want_gone: Vec<u32> = model
                .iter()
                .filter(|(_, &(idle, inner))| inner != 1 && idle + 5000 < now)
                .map(|(&k, _)| k)
                .collect();
            for k in &want_gone {
                model.remove(k);
            }
            gone.sort();
            want_gone.sort();
            assert_eq!(gone, want_gone, "round {round} at {now}");
            assert_eq!(done.removed, gone.len() as u64);
            compactions += u32::from(done.compacted);
            let order_after: Vec<u32> = table.iter().map(|(_, f)| f.key.src_ip as u32).collect();
            let kept: Vec<u32> = order_before
                .into_iter()
                .filter(|k| !gone.contains(k))
                .collect();
            assert_eq!(order_after, kept, "round {round}: order kept");
            // A packet of flow k: made if new, busy for a while; flow 3 made
            // with inner 1 stays busy (idle_since follows now).
            let busy = x % 300;
            let inner = if k == 3 { 1 } else { 20 };
            let new = !model.contains_key(&k);
            match table.get_or_insert(&key(k), now, &mut budget, || Toy {
                key: key(k),
                idle_at_ns: now,
                inner,
            }) {
                Some((_, f)) => {
                    assert_eq!(f.key, key(k));
                    f.idle_at_ns = f.idle_at_ns.max(now + busy);
                    let e = model.entry(k).or_insert((now, inner));
                    e.0 = e.0.max(now + busy);
                    if new {
                        // What the owner charges for the flow's insides.
                        table.add_charged_bytes(inner);
                        budget.bytes += inner;
                    }
                }
                None => {
                    refused += 1;
                    assert!(!model.contains_key(&k));
                    assert_eq!(model.len(), 150, "refused below --max-flows");
                }
            }
            assert_eq!(table.len(), model.len());
            let charged: usize = model.values().map(|&(_, inner)| 100 + inner).sum();
            assert_eq!(table.charged_bytes(), charged);
            assert_eq!((budget.live, budget.bytes), (model.len(), charged));
        }
        assert!(compactions > 5 && refused > 100, "{compactions} {refused}");
    }

    #[test]
    fn a_table_keeps_the_live_flows_in_order_under_churn() {
        churn::<FlowIndex>();
        churn::<MapIndex>();
    }
}

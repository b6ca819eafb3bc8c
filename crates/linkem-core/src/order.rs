//! Release order: items leave by (release time, insertion sequence), so equal
//! release times leave in the order they were pushed.
//!
//! # Structure
//! A binary min-heap (std's `BinaryHeap`, which is well kept and tuned) over
//! entries `(release_ns, seq, item)`, compared on `(release_ns, seq)` only; `seq`
//! is a counter the queue assigns at each push. Both keys are plain integers, so
//! the order is total and identical on every machine.
//!
//! # Cost
//! `push` and `pop` each take O(log n) comparisons of two u64 pairs and moves of
//! one entry per level; `peek_release_ns` is O(1). Measured with `cargo bench -p
//! linkem-core --bench order` (a hold model: pop the earliest, push one released
//! a little later, so n stays constant), beside std's `BinaryHeap` on the same
//! keys in the same run: on the 2-core reference machine, shared and loaded,
//! about 120 ns per pop+push at n = 1 000 and 620 ns at n = 100 000 (cache misses
//! dominate), equal to the bare `BinaryHeap` within 1 %; docs/numbers.md has the
//! figures.
//!
//! # The many-pipe merge
//! Packets of one pipe leave that pipe in release order (its delay line is a
//! FIFO unless it reorders), so a merge of P pipes need not hold every packet in
//! one heap: it keeps each pipe's packets in the pipe's own FIFO and only the head
//! of each non-empty FIFO here, as `ReleaseQueue<PipeId>`. Popping the earliest
//! head and pushing that pipe's next head costs O(log P) per packet for P
//! *active* pipes, independent of how many packets wait (17 levels for 100 000
//! active pipes); idle pipes cost nothing. Ties between pipes must then follow
//! the packets' own arrival order rather than the moment a head was pushed:
//! [`ReleaseQueue::push_seq`] takes that sequence from the caller.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

struct Entry<T> {
    release_ns: u64,
    seq: u64,
    item: T,
}

impl<T> Entry<T> {
    /// (release_ns, seq) as one integer: one comparison instead of two.
    #[inline]
    fn key(&self) -> u128 {
        (u128::from(self.release_ns) << 64) | u128::from(self.seq)
    }
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<T> Eq for Entry<T> {}

// Reversed throughout, so that std's max-heap yields the earliest key. The
// comparison operators are written out because the heap's sifting uses them
// directly.
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
    #[inline]
    fn lt(&self, other: &Self) -> bool {
        other.key() < self.key()
    }
    #[inline]
    fn le(&self, other: &Self) -> bool {
        other.key() <= self.key()
    }
    #[inline]
    fn gt(&self, other: &Self) -> bool {
        other.key() > self.key()
    }
    #[inline]
    fn ge(&self, other: &Self) -> bool {
        other.key() >= self.key()
    }
}

impl<T> Ord for Entry<T> {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        other.key().cmp(&self.key())
    }
}

/// Items ordered by (release_ns, insertion sequence): equal release times leave
/// in arrival order.
pub struct ReleaseQueue<T> {
    heap: BinaryHeap<Entry<T>>,
    next_seq: u64,
}

impl<T> Default for ReleaseQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> std::fmt::Debug for ReleaseQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseQueue")
            .field("len", &self.len())
            .field("next_release_ns", &self.peek_release_ns())
            .finish()
    }
}

impl<T> ReleaseQueue<T> {
    /// Keeps only the items for which `keep` is true (any order).
    pub fn retain(&mut self, mut keep: impl FnMut(&mut T) -> bool) {
        let entries = std::mem::take(&mut self.heap).into_vec();
        self.heap = entries
            .into_iter()
            .filter_map(|mut e| keep(&mut e.item).then_some(e))
            .collect();
    }

    /// An empty queue.
    pub fn new() -> Self {
        ReleaseQueue {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }

    /// An empty queue with room for `n` items before it allocates.
    pub fn with_capacity(n: usize) -> Self {
        ReleaseQueue {
            heap: BinaryHeap::with_capacity(n),
            next_seq: 0,
        }
    }

    /// Adds `item`, to leave at `release_ns` after every item pushed earlier with
    /// the same release time.
    #[inline]
    pub fn push(&mut self, release_ns: u64, item: T) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Entry {
            release_ns,
            seq,
            item,
        });
    }

    /// Adds `item` with a tie-break sequence chosen by the caller (for instance
    /// the packet's arrival number when merging per-source FIFOs). Items with
    /// equal release times leave by increasing `seq`; a queue should be fed by
    /// `push` or by `push_seq`, not both.
    #[inline]
    pub fn push_seq(&mut self, release_ns: u64, seq: u64, item: T) {
        self.heap.push(Entry {
            release_ns,
            seq,
            item,
        });
    }

    /// The earliest release time, if any item waits.
    #[inline]
    pub fn peek_release_ns(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.release_ns)
    }

    /// The earliest item's (release time, sequence).
    #[inline]
    fn peek_key(&self) -> Option<(u64, u64)> {
        self.heap.peek().map(|e| (e.release_ns, e.seq))
    }

    /// The earliest item and its release time, without taking it.
    #[inline]
    pub fn peek(&self) -> Option<(u64, &T)> {
        self.heap.peek().map(|e| (e.release_ns, &e.item))
    }

    /// Takes the earliest item.
    #[inline]
    pub fn pop(&mut self) -> Option<(u64, T)> {
        self.heap.pop().map(|e| (e.release_ns, e.item))
    }

    /// Pops the earliest item if its release time is <= now_ns.
    #[inline]
    pub fn pop_due(&mut self, now_ns: u64) -> Option<(u64, T)> {
        if self.peek_release_ns()? <= now_ns {
            self.pop()
        } else {
            None
        }
    }

    /// The number of items waiting.
    #[inline]
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no item waits.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// Items ordered as in a [`ReleaseQueue`], for a caller that pushes them
/// mostly in release order (a replay through a link that does not reorder):
/// an item released no earlier than the last one of the run joins the run, a
/// FIFO, at O(1) each way; only the others go into the heap, and a pop takes
/// the earlier of the two heads. A heap of the 10 000 frames a 10 ms delay
/// holds at 1 Mpps costs ~14 levels of sifting per pop, most of a replay's
/// time beside reading and writing its captures.
pub struct ReleaseRuns<T> {
    /// (release_ns, seq, item), increasing in (release_ns, seq).
    run: VecDeque<(u64, u64, T)>,
    rest: ReleaseQueue<T>,
    next_seq: u64,
}

impl<T> Default for ReleaseRuns<T> {
    fn default() -> Self {
        ReleaseRuns {
            run: VecDeque::new(),
            rest: ReleaseQueue::new(),
            next_seq: 0,
        }
    }
}

impl<T> ReleaseRuns<T> {
    /// Adds `item`, to leave at `release_ns` after every item pushed earlier with
    /// the same release time.
    #[inline]
    pub fn push(&mut self, release_ns: u64, item: T) {
        let seq = self.next_seq;
        self.next_seq += 1;
        match self.run.back() {
            Some(&(last_ns, _, _)) if release_ns < last_ns => {
                self.rest.push_seq(release_ns, seq, item)
            }
            _ => self.run.push_back((release_ns, seq, item)),
        }
    }

    /// Whether the run's head leaves before the heap's.
    #[inline]
    fn run_first(&self) -> Option<bool> {
        match (self.run.front(), self.rest.peek_key()) {
            (Some(&(r, s, _)), Some(h)) => Some((r, s) < h),
            (Some(_), None) => Some(true),
            (None, Some(_)) => Some(false),
            (None, None) => None,
        }
    }

    /// Takes the earliest item.
    #[inline]
    pub fn pop(&mut self) -> Option<(u64, T)> {
        if self.run_first()? {
            self.run.pop_front().map(|(r, _, item)| (r, item))
        } else {
            self.rest.pop()
        }
    }

    /// Pops the earliest item if its release time is <= now_ns.
    #[inline]
    pub fn pop_due(&mut self, now_ns: u64) -> Option<(u64, T)> {
        let first_ns = if self.run_first()? {
            self.run.front().map(|e| e.0)
        } else {
            self.rest.peek_release_ns()
        };
        if first_ns? <= now_ns {
            self.pop()
        } else {
            None
        }
    }

    /// The number of items waiting.
    pub fn len(&self) -> usize {
        self.run.len() + self.rest.len()
    }

    /// Whether no item waits.
    pub fn is_empty(&self) -> bool {
        self.run.is_empty() && self.rest.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_release_times_leave_in_push_order() {
        let mut q = ReleaseQueue::new();
        q.push(5, 'a');
        q.push(3, 'b');
        q.push(5, 'c');
        q.push(3, 'd');
        assert_eq!(q.len(), 4);
        assert_eq!(q.peek_release_ns(), Some(3));
        assert_eq!(q.pop_due(2), None);
        assert_eq!(q.pop_due(3), Some((3, 'b')));
        assert_eq!(q.pop(), Some((3, 'd')));
        assert_eq!(q.pop_due(4), None);
        assert_eq!(q.pop(), Some((5, 'a')));
        assert_eq!(q.pop(), Some((5, 'c')));
        assert_eq!(q.pop(), None);
        assert!(q.is_empty());
    }

    #[test]
    fn explicit_sequences_break_ties() {
        let mut q = ReleaseQueue::with_capacity(4);
        q.push_seq(7, 9, "late arrival");
        q.push_seq(7, 2, "early arrival");
        assert_eq!(q.peek(), Some((7, &"early arrival")));
        assert_eq!(q.pop(), Some((7, "early arrival")));
        assert_eq!(q.pop(), Some((7, "late arrival")));
    }

    #[test]
    fn runs_leave_as_a_release_queue_does() {
        // Mostly in order, with ties and items that go back: the same order
        // as the heap alone.
        let mut rng = 7u64;
        let (mut q, mut runs) = (ReleaseQueue::new(), ReleaseRuns::default());
        let mut t = 0u64;
        for i in 0..2_000u32 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let draw = rng >> 33;
            t += draw % 3;
            let release = if draw.is_multiple_of(7) {
                t.saturating_sub(draw % 50)
            } else {
                t
            };
            q.push(release, i);
            runs.push(release, i);
            if draw.is_multiple_of(5) {
                assert_eq!(runs.pop_due(t / 2), q.pop_due(t / 2));
            }
        }
        assert_eq!(runs.len(), q.len());
        while let Some(item) = q.pop() {
            assert_eq!(runs.pop(), Some(item));
        }
        assert!(runs.is_empty() && runs.pop().is_none());
    }
}

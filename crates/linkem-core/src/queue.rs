//! The packet FIFO every queue of a scheduler holds: [`Pkt`], a handle to a
//! packet waiting in a queue with what the scheduler and the AQM read, and
//! [`Fifo`], a FIFO of them with its byte count.
//!
//! It sits in a module of its own, below both [`crate::sched`] (whose classes
//! hold one [`Fifo`] each) and [`crate::aqm`] (CoDel takes packets from the
//! head of the FIFO it manages), so that the AQMs need nothing from the
//! schedulers that use them. `crate::sched` re-exports both types.
//!
//! Invariant: [`Fifo::bytes`] is the sum of [`Pkt::len_bytes`] over the
//! packets queued, and [`Fifo::max_len`] the largest `len_bytes` ever pushed.

use std::collections::VecDeque;

/// A packet waiting in a queue: a handle into the owner's store plus what the
/// scheduler and the AQM read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pkt {
    /// Index of the packet in the owner's store (a slot in
    /// [`crate::sched::service::SchedLink`]'s slab); the scheduler never sees the bytes.
    pub handle: u32,
    /// Frame length in bytes (without the pipe's `overhead`): what DRR and
    /// FQ charge to a deficit and what WF²Q+/QFQ divide by the weight.
    pub len_bytes: u32,
    /// When the packet was queued, in ns (set by [`crate::sched::Queues::push`]); its
    /// sojourn at dequeue is `now − enq_ns`.
    pub enq_ns: u64,
    /// ECN-capable transport (ECT(0), ECT(1) or CE).
    pub ect: bool,
    /// Marked CE at enqueue (RED, PIE).
    pub ce: bool,
}

/// A FIFO of packets with its byte count.
#[derive(Debug, Clone, Default)]
pub struct Fifo {
    q: VecDeque<Pkt>,
    /// Sum of [`Pkt::len_bytes`] of the packets queued now (the packet on the
    /// wire is not in the FIFO).
    pub bytes: u64,
    /// Largest packet this queue has held (CoDel's maxpacket).
    pub max_len: u32,
}

impl Fifo {
    /// Appends `p` at the tail and adds its length to [`Fifo::bytes`]
    /// (no limit check: [`crate::sched::Queues::push`] does those).
    #[inline]
    pub fn push(&mut self, p: Pkt) {
        self.bytes += p.len_bytes as u64;
        self.max_len = self.max_len.max(p.len_bytes);
        self.q.push_back(p);
    }
    /// Removes the head packet (None when empty) and takes its length off
    /// [`Fifo::bytes`].
    #[inline]
    pub fn pop(&mut self) -> Option<Pkt> {
        let p = self.q.pop_front()?;
        self.bytes -= p.len_bytes as u64;
        Some(p)
    }
    /// The packet that leaves next, without removing it.
    #[inline]
    pub fn head(&self) -> Option<&Pkt> {
        self.q.front()
    }
    /// Packets queued now.
    #[inline]
    pub fn len(&self) -> usize {
        self.q.len()
    }
    /// No packet is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}

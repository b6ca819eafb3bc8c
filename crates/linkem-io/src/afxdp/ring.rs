//! Single-producer single-consumer rings as AF_XDP lays them out: a u32
//! producer index, a u32 consumer index, a u32 flags word and a power-of-two
//! array of entries, the indices free-running (wrapping at 2^32) and masked
//! on access. The user side keeps cached copies of both indices so that most
//! operations touch no shared cache line. Generic over raw pointers so the
//! tests below run them over plain memory, no socket.

use std::sync::atomic::{AtomicU32, Ordering};

/// Where one ring lives.
pub struct RingMem<T> {
    pub producer: *const AtomicU32,
    pub consumer: *const AtomicU32,
    pub flags: *const AtomicU32,
    pub descs: *mut T,
    /// Entries, a power of two.
    pub size: u32,
}

impl<T> RingMem<T> {
    /// The ring inside an AF_XDP ring mapping.
    ///
    /// # Safety
    /// `map` must be the mapping of a ring of `size` entries of T whose
    /// layout `off` describes.
    pub(super) unsafe fn at(
        map: &super::umem::Mmap,
        off: &libc::xdp_ring_offset,
        size: u32,
    ) -> RingMem<T> {
        let base = map.ptr.as_ptr();
        // Safety: the kernel's offsets lie inside the mapping (caller's promise).
        unsafe {
            RingMem {
                producer: base.add(off.producer as usize) as *const AtomicU32,
                consumer: base.add(off.consumer as usize) as *const AtomicU32,
                flags: base.add(off.flags as usize) as *const AtomicU32,
                descs: base.add(off.desc as usize) as *mut T,
                size,
            }
        }
    }
}

/// The producing side: fill and tx rings in user space.
pub struct Producer<T> {
    mem: RingMem<T>,
    mask: u32,
    /// Next index to write; published up to here by `publish`.
    cached_prod: u32,
    /// Consumer index + size, as last read: we may write below it.
    cached_cons: u32,
}

impl<T: Copy> Producer<T> {
    /// # Safety
    /// The pointers of `mem` must stay valid and aligned while the
    /// Producer lives, `descs` must hold `size` entries, and nobody else
    /// may produce into the ring.
    pub unsafe fn new(mem: RingMem<T>) -> Self {
        assert!(
            mem.size.is_power_of_two(),
            "ring size must be a power of two"
        );
        // Safety: valid pointers (caller's promise).
        let (prod, cons) = unsafe {
            (
                (*mem.producer).load(Ordering::Relaxed),
                (*mem.consumer).load(Ordering::Acquire),
            )
        };
        Producer {
            mask: mem.size - 1,
            cached_prod: prod,
            cached_cons: cons.wrapping_add(mem.size),
            mem,
        }
    }

    fn producer(&self) -> &AtomicU32 {
        // Safety: valid for the Producer's life (constructor contract).
        unsafe { &*self.mem.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // Safety: as above.
        unsafe { &*self.mem.consumer }
    }

    /// Free entries, reading the consumer index only when the cached
    /// value shows none.
    pub fn free(&mut self) -> u32 {
        self.free_at_least(1)
    }

    /// Free entries, reading the consumer index only when the cached value
    /// shows fewer than `want` (a frame of several parts needs them all).
    pub fn free_at_least(&mut self, want: u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= want {
            return free;
        }
        // Acquire: the consumer is done with the entries it released.
        self.cached_cons = self
            .consumer()
            .load(Ordering::Acquire)
            .wrapping_add(self.mem.size);
        self.cached_cons.wrapping_sub(self.cached_prod)
    }

    /// Writes one entry, invisible to the consumer until `publish`.
    /// False if the ring is full.
    pub fn push(&mut self, v: T) -> bool {
        if self.free() == 0 {
            return false;
        }
        let i = (self.cached_prod & self.mask) as usize;
        // Safety: i < size; the slot is free (below the consumer index +
        // size) and not yet published, so the consumer does not read it.
        unsafe { self.mem.descs.add(i).write(v) };
        self.cached_prod = self.cached_prod.wrapping_add(1);
        true
    }

    /// Makes every pushed entry visible to the consumer.
    pub fn publish(&mut self) {
        // Release: the entries are written before the index says so.
        self.producer().store(self.cached_prod, Ordering::Release);
    }

    /// Published entries the consumer has not taken yet.
    pub fn outstanding(&self) -> u32 {
        self.producer()
            .load(Ordering::Relaxed)
            .wrapping_sub(self.consumer().load(Ordering::Acquire))
    }

    /// The consumer (kernel) asks to be woken up (`XDP_RING_NEED_WAKEUP`).
    pub fn needs_wakeup(&self) -> bool {
        // Safety: valid for the Producer's life (constructor contract).
        unsafe { (*self.mem.flags).load(Ordering::Acquire) & libc::XDP_RING_NEED_WAKEUP != 0 }
    }
}

/// The consuming side: rx and completion rings in user space.
pub struct Consumer<T> {
    mem: RingMem<T>,
    mask: u32,
    /// Producer index as last read.
    cached_prod: u32,
    /// Next index to read; released up to here by `release`.
    cached_cons: u32,
}

impl<T: Copy> Consumer<T> {
    /// # Safety
    /// As for [`Producer::new`], with nobody else consuming.
    pub unsafe fn new(mem: RingMem<T>) -> Self {
        assert!(
            mem.size.is_power_of_two(),
            "ring size must be a power of two"
        );
        // Safety: valid pointers (caller's promise).
        let (prod, cons) = unsafe {
            (
                (*mem.producer).load(Ordering::Acquire),
                (*mem.consumer).load(Ordering::Relaxed),
            )
        };
        Consumer {
            mask: mem.size - 1,
            cached_prod: prod,
            cached_cons: cons,
            mem,
        }
    }

    /// Entries ready to read, at most `max`; reads the producer index
    /// only when the cached one shows fewer than `max`.
    pub fn available(&mut self, max: u32) -> u32 {
        let mut n = self.cached_prod.wrapping_sub(self.cached_cons);
        if n < max {
            // Safety: valid for the Consumer's life (constructor contract).
            // Acquire: the entries are visible once the index is.
            self.cached_prod = unsafe { (*self.mem.producer).load(Ordering::Acquire) };
            n = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        n.min(max)
    }

    /// The `i`-th unreleased entry; `i` below what `available` returned.
    pub fn get(&self, i: u32) -> T {
        assert!(
            i < self.cached_prod.wrapping_sub(self.cached_cons),
            "ring entry {i} not available"
        );
        let at = (self.cached_cons.wrapping_add(i) & self.mask) as usize;
        // Safety: at < size; the entry is published and not released, so
        // the producer does not write it.
        unsafe { self.mem.descs.add(at).read() }
    }

    /// Gives `n` read entries back to the producer.
    pub fn release(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        debug_assert!(n <= self.cached_prod.wrapping_sub(self.cached_cons));
        self.cached_cons = self.cached_cons.wrapping_add(n);
        // Safety: valid for the Consumer's life (constructor contract).
        // Release: our reads of the entries happen before the producer reuses them.
        unsafe { (*self.mem.consumer).store(self.cached_cons, Ordering::Release) };
    }
}

#[cfg(test)]
mod tests {
    use super::{Consumer, Producer, RingMem};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A ring in plain memory, standing for the kernel's mapping.
    struct TestRing<T> {
        producer: AtomicU32,
        consumer: AtomicU32,
        flags: AtomicU32,
        descs: Vec<T>,
    }

    impl<T: Copy + Default> TestRing<T> {
        fn new(size: u32, start: u32) -> Box<Self> {
            Box::new(TestRing {
                producer: AtomicU32::new(start),
                consumer: AtomicU32::new(start),
                flags: AtomicU32::new(0),
                descs: vec![T::default(); size as usize],
            })
        }

        fn mem(&mut self) -> RingMem<T> {
            RingMem {
                producer: &self.producer,
                consumer: &self.consumer,
                flags: &self.flags,
                descs: self.descs.as_mut_ptr(),
                size: self.descs.len() as u32,
            }
        }

        /// Both sides of the ring. Safety for the tests: the Box outlives them.
        fn sides(&mut self) -> (Producer<T>, Consumer<T>) {
            // Safety: the TestRing outlives both views in every test, and
            // each test uses exactly one producer and one consumer.
            unsafe { (Producer::new(self.mem()), Consumer::new(self.mem())) }
        }
    }

    #[test]
    fn a_ring_fills_to_its_size_and_drains_in_order_across_the_index_wrap() {
        // Start 3 below 2^32 so the indices wrap during the test.
        let mut mem = TestRing::<u64>::new(8, u32::MAX - 2);
        let (mut p, mut c) = mem.sides();
        for round in 0..5u64 {
            for i in 0..8 {
                assert!(p.push(round * 100 + i), "room for entry {i}");
            }
            assert!(!p.push(999), "a full ring refuses");
            assert_eq!(c.available(16), 0, "nothing visible before publish");
            p.publish();
            assert_eq!(p.outstanding(), 8);
            assert_eq!(c.available(3), 3);
            assert_eq!(c.available(16), 8);
            let got: Vec<u64> = (0..8).map(|i| c.get(i)).collect();
            assert_eq!(got, (0..8).map(|i| round * 100 + i).collect::<Vec<_>>());
            c.release(5);
            assert_eq!(p.outstanding(), 3);
            assert_eq!(p.free(), 5, "released entries become free");
            assert_eq!(c.available(16), 3);
            c.release(3);
        }
        assert_eq!(
            mem.producer.load(Ordering::Relaxed),
            (u32::MAX - 2).wrapping_add(40)
        );
        assert_eq!(
            mem.consumer.load(Ordering::Relaxed),
            mem.producer.load(Ordering::Relaxed)
        );
    }

    #[test]
    fn room_for_several_entries_is_seen_once_the_consumer_frees_it() {
        let mut mem = TestRing::<u64>::new(4, 0);
        let (mut p, mut c) = mem.sides();
        for i in 0..4 {
            assert!(p.push(i));
        }
        p.publish();
        assert_eq!(c.available(4), 4);
        c.release(1);
        assert_eq!(p.free(), 1, "the one freed entry is seen");
        c.release(2);
        // The cached count (1) is too small for 3: the index is read again.
        assert_eq!(p.free_at_least(3), 3);
    }

    #[test]
    fn uneven_batches_keep_fifo_order() {
        let mut mem = TestRing::<u64>::new(16, u32::MAX - 100);
        let (mut p, mut c) = mem.sides();
        let (mut next_in, mut next_out) = (0u64, 0u64);
        // A small LCG picks batch sizes; deterministic.
        let mut x = 12345u32;
        for _ in 0..2000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            for _ in 0..(x >> 16) % 7 {
                if p.push(next_in) {
                    next_in += 1;
                }
            }
            p.publish();
            let n = c.available((x >> 8) % 9);
            for i in 0..n {
                assert_eq!(c.get(i), next_out);
                next_out += 1;
            }
            c.release(n);
        }
        assert!(next_out > 1000, "the test moved entries ({next_out})");
        assert!(next_in - next_out <= 16);
    }

    #[test]
    #[should_panic(expected = "not available")]
    fn reading_past_the_available_entries_panics() {
        let mut mem = TestRing::<u64>::new(4, 0);
        let (mut p, mut c) = mem.sides();
        p.push(1);
        p.publish();
        assert_eq!(c.available(4), 1);
        c.get(1);
    }

    #[test]
    fn need_wakeup_reads_the_flags_word() {
        let mut mem = TestRing::<u64>::new(4, 0);
        let (p, _c) = mem.sides();
        assert!(!p.needs_wakeup());
        mem.flags
            .store(libc::XDP_RING_NEED_WAKEUP, Ordering::Relaxed);
        assert!(p.needs_wakeup());
    }

    #[test]
    fn a_producer_thread_and_a_consumer_thread_agree() {
        struct SendBox<T>(T);
        // Safety: test only: the views are used by one thread each, over a
        // ring that outlives both threads (joined before it drops).
        unsafe impl<T> Send for SendBox<T> {}
        const N: u64 = 200_000;
        let mut mem = TestRing::<u64>::new(64, u32::MAX - 1000);
        let (p, c) = mem.sides();
        let (p, c) = (SendBox(p), SendBox(c));
        std::thread::scope(|s| {
            s.spawn(move || {
                let mut p = p;
                let mut v = 0;
                while v < N {
                    while v < N && p.0.push(v) {
                        v += 1;
                    }
                    p.0.publish();
                    std::hint::spin_loop();
                }
            });
            s.spawn(move || {
                let mut c = c;
                let mut expect = 0;
                while expect < N {
                    let n = c.0.available(32);
                    for i in 0..n {
                        assert_eq!(c.0.get(i), expect);
                        expect += 1;
                    }
                    c.0.release(n);
                }
            });
        });
    }
}

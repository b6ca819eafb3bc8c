//! The delay line: one contiguous circular buffer per direction holding every
//! packet between its arrival and its release (TLEM §IV-F, docs/model.md).
//!
//! ```text
//!  input stage (producer)                        output stage (consumer)
//!  writes at `tail` ──▶ [hdr|frame··][hdr|frame····][skip···]│[hdr|frame]… ──▶ reads at `head`
//! ```
//!
//! Each record is a 16-byte header (release time, length, flags) followed by the
//! frame, padded to a 64-byte cache line, and never split across the end of the
//! buffer: when a record does not fit before the end, a skip record fills the
//! rest and the record starts at offset 0. One producer and one consumer; the
//! only shared state is two monotonically increasing byte counters, each
//! written by one side. Each side keeps a private copy of the other's counter
//! and refreshes it only when it runs out of data or room, so the common case
//! touches no shared cache line.
//!
//! Memory is mapped without being touched (a line sized for 10 s at 10 Gbit/s
//! costs only what traffic fills) and becomes resident on first write. A first
//! write to a transparent huge page can stall the writing thread for
//! milliseconds while the kernel compacts memory for it; on the input stage that
//! makes packets late (the first ping after start was 5 ms late). So a pager
//! thread keeps [`POPULATE_AHEAD_BYTES`] in front of the tail resident with
//! `MADV_POPULATE_WRITE` (which never changes the bytes, so it may run beside
//! the producer), and the first stretch is made resident before the line is
//! handed out (a line of a bridge of many pairs: only 32 KiB, in small pages,
//! so that an idle link costs little; [`LAZY_FIRST_RESIDENT_BYTES`] says
//! why). A line leaves the pager once it has been resident whole (after the
//! first lap nothing faults again) or its producer is gone. Kernels before
//! 5.14 lack the advice: the pager then drops the line and the producer faults
//! as before. One pager thread serves every line of the process (a bridge of
//! 20 pairs has 40 lines), and ends when it has none left; it looks every
//! [`PAGER_PERIOD`] while some tail moves, and backs off to
//! [`PAGER_IDLE_PERIOD`] while none does; 8 MiB ahead lasts 6.7 ms at
//! 10 Gbit/s, longer than the idle period. When no tail has moved for
//! [`PAGER_SLEEP_AFTER`], it sleeps until one has used up
//! [`POPULATE_CHUNK_BYTES`] of what it made resident ahead: each line then
//! holds the tail at which its producer wakes the pager (`pager_wake_at`,
//! one relaxed load and compare per push), so an idle bridge costs the pager
//! no wake-up at all, and a woken pager still has the rest of the stretch
//! ahead (6 MiB, 5 ms at 10 Gbit/s) to catch up. A push that misses the
//! pager's announcement (the two race without a fence) is followed by the
//! next push's look; a line that sees no more pushes needs no paging. A mark
//! left on a line after the pager woke for another costs at most one more
//! wake-up of the pager.
//!
//! A record is one wire frame, or (flag `WHOLE`) a super-frame stored whole
//! for the wire frames it stands for ([`Producer::push_whole`]): its frame
//! then starts with a [`WHOLE_PREFIX_BYTES`] prefix, the offload as a
//! `virtio_net_hdr` (10 bytes), 2 spare, and the number of wire frames (u32),
//! and the header's length counts the prefix. A whole record is at most
//! 64 KiB + 32 bytes (two cache lines over 64 KiB once aligned), far below
//! the smallest line (2 MiB).
//!
//! Why hand-written rather than an SPSC crate: the records have variable length
//! (a 64-byte frame takes 128 bytes, not a 2 KiB slot), which is what lets a 10 s
//! delay at 1 Gbit/s fit in 1.25 GB plus headers instead of tens of gigabytes.

use linkem_core::wire::{Offload, VIRTIO_NET_HDR_BYTES};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How much of the line past the tail the pager keeps resident: 6 ms of
/// traffic at 10 Gbit/s, several times the pager's polling period.
pub const POPULATE_AHEAD_BYTES: u64 = 8 << 20;
/// What the pager makes resident per call: one huge page.
const POPULATE_CHUNK_BYTES: u64 = 2 << 20;
/// How often the pager looks at the tails while one of them moves.
const PAGER_PERIOD: Duration = Duration::from_millis(1);
/// How often it looks at most while none moves (it doubles its period up to this).
const PAGER_IDLE_PERIOD: Duration = Duration::from_millis(4);
/// How long no tail moves before the pager sleeps until a producer wakes it.
const PAGER_SLEEP_AFTER: Duration = Duration::from_millis(20);

/// The lines the pager thread still serves, and whether it runs.
struct Pager {
    lines: Vec<std::sync::Weak<Shared>>,
    running: bool,
    /// The pager thread, for the producers that wake it.
    thread: Option<std::thread::Thread>,
}

static PAGER: std::sync::Mutex<Pager> = std::sync::Mutex::new(Pager {
    lines: Vec::new(),
    running: false,
    thread: None,
});

/// Wakes the pager thread, if one runs (it may be asleep, see the module doc).
fn wake_pager() {
    if let Some(t) = &pager().thread {
        t.unpark();
    }
}

fn pager() -> std::sync::MutexGuard<'static, Pager> {
    PAGER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Hands `line` to the process's pager thread, starting it if none runs.
fn page_in_background(line: &Arc<Shared>) {
    let mut p = pager();
    p.lines.push(Arc::downgrade(line));
    if p.running {
        // It may be asleep, with no look at the new line planned.
        if let Some(t) = &p.thread {
            t.unpark();
        }
        return;
    }
    p.running = true;
    let started = std::thread::Builder::new()
        .name("linkem-pager".into())
        .spawn(run_pager);
    match started {
        Ok(h) => p.thread = Some(h.thread().clone()),
        Err(_) => {
            // Without the thread the producers fault pages in themselves: slower, not wrong.
            p.running = false;
            p.lines.clear();
        }
    }
}

/// The pager's loop: keeps each line's tail [`POPULATE_AHEAD_BYTES`] ahead
/// until the line needs it no more; ends when no line is left.
fn run_pager() {
    let mut period = PAGER_PERIOD;
    let mut still = Duration::ZERO;
    loop {
        let lines: Vec<Arc<Shared>> = {
            let mut p = pager();
            p.lines.retain(|w| w.strong_count() > 0);
            if p.lines.is_empty() {
                p.running = false;
                p.thread = None;
                return;
            }
            p.lines
                .iter()
                .filter_map(std::sync::Weak::upgrade)
                .collect()
        };
        let mut moved = false;
        let mut done = Vec::new();
        for line in &lines {
            match line.page_step() {
                Some(worked) => moved |= worked,
                None => done.push(Arc::as_ptr(line)),
            }
        }
        if !done.is_empty() {
            pager().lines.retain(|w| !done.contains(&w.as_ptr()));
        }
        still = if moved {
            Duration::ZERO
        } else {
            still + period
        };
        if still >= PAGER_SLEEP_AFTER && done.is_empty() {
            let asleep = lines.iter().all(|l| l.pager_sleeps());
            // Holding no line while asleep: a dropped line's memory goes.
            drop(lines);
            if asleep {
                // Woken by a producer, a new line or a closing one.
                std::thread::park();
            }
            still = Duration::ZERO;
            period = PAGER_PERIOD;
            continue;
        }
        drop(lines);
        period = if moved {
            PAGER_PERIOD
        } else {
            (period * 2).min(PAGER_IDLE_PERIOD)
        };
        std::thread::sleep(period);
    }
}

/// Record alignment: one cache line, so records never share a line.
pub const RECORD_ALIGN: usize = 64;
const HEADER: usize = 16;
const FLAG_SKIP: u32 = 1;
const FLAG_COPY: u32 = 2;
/// A super-frame stored whole: its frame starts with the whole prefix.
const FLAG_WHOLE: u32 = 4;
/// The frame's L4 checksum was computed by the producer after the frame's
/// last change ([`Producer::push_checksummed`]).
const FLAG_CHECKSUMMED: u32 = 8;
/// The consumer has already given the record its end before its release
/// ([`Consumer::discard_where`]): taken later, it is only freed.
const FLAG_DISCARDED: u32 = 16;
/// Bytes before the frame of a whole record: `virtio_net_hdr`, 2 spare, the
/// number of wire frames (u32, native order).
pub const WHOLE_PREFIX_BYTES: usize = 16;
/// Bits 8..32 of the flags: the record's group ([`Producer::push_with_group`]).
const GROUP_SHIFT: u32 = 8;
/// Largest group a record can carry.
pub const MAX_GROUP: u32 = u32::MAX >> GROUP_SHIFT;

/// Memory for the buffer: anonymous, preferably on huge pages (fewer TLB misses
/// for a buffer of gigabytes), released on drop.
struct Region {
    ptr: *mut u8,
    len: usize,
    huge: bool,
}

// Safety: the region is plain memory; access is coordinated by the ring's
// counters (each byte is written by the producer before the counter that
// publishes it, and read by the consumer only after it observes that counter).
unsafe impl Send for Region {}
// Safety: shared by one producer and one consumer, which touch disjoint bytes
// at any time (the free part and the published part, split by the counters);
// the pager only asks the kernel to fault pages in, never changing bytes.
unsafe impl Sync for Region {}

impl Region {
    /// Maps `len` bytes; `lazy` (a line of a bridge of many pairs) keeps its
    /// first huge page's worth in small pages (see [`LAZY_FIRST_RESIDENT_BYTES`]).
    fn new(len: usize, lazy: bool) -> Result<Region, String> {
        const HUGE_2M: usize = 2 << 20;
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        if len >= HUGE_2M && len.is_multiple_of(HUGE_2M) {
            // Without MAP_NORESERVE the kernel refuses the mapping when too few huge
            // pages are reserved, rather than raising SIGBUS on first touch.
            // Safety: anonymous mapping with no address hint; the result is checked.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    prot,
                    flags | libc::MAP_HUGETLB,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                return Ok(Region {
                    ptr: p as *mut u8,
                    len,
                    huge: true,
                });
            }
        }
        // NORESERVE: a large line costs memory only as far as traffic fills it.
        // Safety: as above, without huge pages.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                flags | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!(
                "cannot map a {} MiB delay line: {}",
                len >> 20,
                std::io::Error::last_os_error()
            ));
        }
        // Transparent huge pages where hugetlbfs had none reserved; advice only.
        // A lazy line's first 2 MiB stay small pages: there an idle link's few
        // stray frames would otherwise make a whole huge page resident.
        let small = if lazy { HUGE_2M.min(len) } else { 0 };
        // Safety: p..p+len is the mapping just created; small <= len.
        unsafe {
            if small > 0 {
                libc::madvise(p, small, libc::MADV_NOHUGEPAGE);
            }
            if small < len {
                libc::madvise(
                    p.cast::<u8>().add(small).cast(),
                    len - small,
                    libc::MADV_HUGEPAGE,
                );
            }
        }
        Ok(Region {
            ptr: p as *mut u8,
            len,
            huge: false,
        })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // Safety: ptr/len describe a mapping this Region created and still owns.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

struct Shared {
    region: Region,
    /// Bytes from the start of the region made resident so far (never
    /// decreases; equals the length once the pager is done).
    populated: AtomicU64,
    /// Bytes ever consumed; written by the consumer only.
    head: AtomicU64,
    /// Bytes ever produced; written by the producer only.
    tail: AtomicU64,
    closed: AtomicBool,
    /// Made resident as traffic comes ([`delay_line_with`] with less than a
    /// full stretch first).
    lazy: bool,
    /// The tail at which the producer wakes the sleeping pager; `u64::MAX`
    /// while the pager looks by itself (see the module doc).
    pager_wake_at: AtomicU64,
}

/// Creates a delay line of at least `capacity_bytes` (rounded up to 2 MiB),
/// its first [`POPULATE_AHEAD_BYTES`] resident before it is handed out.
pub fn delay_line(capacity_bytes: usize) -> Result<(Producer, Consumer), String> {
    delay_line_with(capacity_bytes, POPULATE_AHEAD_BYTES)
}

/// What a line of a bridge of many pairs makes resident before its first
/// frame ([`delay_line_with`]): ~20 full-size frames, 250 of 64 bytes; an
/// idle link costs this, not [`POPULATE_AHEAD_BYTES`]. Such a line's first
/// 2 MiB are small pages (`MADV_NOHUGEPAGE`): with transparent huge pages
/// the first touch would make a whole 2 MiB page resident, and then the
/// two lines of an idle link cost 4 MiB (a lab of 100 links, 400 MiB).
/// Small pages there cost a busy line only the TLB entries of its first
/// 2 MiB, and a fault of one 4 KiB page (no compaction) where the producer
/// runs ahead of the pager.
pub const LAZY_FIRST_RESIDENT_BYTES: u64 = 32 << 10;

/// [`delay_line`], with only its first `first_resident_bytes` resident
/// before it is handed out: the pager is woken by the first push and keeps
/// [`POPULATE_AHEAD_BYTES`] ahead of the tail from then on, so a line that
/// never carries a frame costs only its first stretch (a bridge of many
/// pairs, most of them idle at any time), and one that does pays page
/// faults only until the pager has caught up.
pub fn delay_line_with(
    capacity_bytes: usize,
    first_resident_bytes: u64,
) -> Result<(Producer, Consumer), String> {
    let cap = capacity_bytes.max(RECORD_ALIGN * 4).div_ceil(2 << 20) * (2 << 20);
    let lazy = first_resident_bytes < POPULATE_AHEAD_BYTES;
    let shared = Arc::new(Shared {
        region: Region::new(cap, lazy)?,
        populated: AtomicU64::new(0),
        head: AtomicU64::new(0),
        tail: AtomicU64::new(0),
        closed: AtomicBool::new(false),
        lazy,
        pager_wake_at: AtomicU64::new(u64::MAX),
    });
    if shared.populate_to(first_resident_bytes.min(POPULATE_AHEAD_BYTES)) {
        page_in_background(&shared);
    }
    Ok((
        Producer {
            shared: shared.clone(),
            cap: cap as u64,
            tail: 0,
            head_cache: 0,
        },
        Consumer {
            shared,
            cap: cap as u64,
            head: 0,
            tail_cache: 0,
        },
    ))
}

/// The system's page size: what madvise's start must be a multiple of.
fn page_bytes() -> u64 {
    // Safety: sysconf has no preconditions; it only reads a constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).ok().filter(|&p| p > 0).unwrap_or(4096)
}

impl Shared {
    /// Makes the region resident up to `end_bytes` (clamped to its length).
    /// Returns false when the kernel cannot (no `MADV_POPULATE_WRITE`, or no
    /// memory): paging ahead stops there.
    fn populate_to(&self, end_bytes: u64) -> bool {
        let len = self.region.len as u64;
        // Whole pages: madvise refuses a start that is not page-aligned
        // (EINVAL), and each call starts where the last one ended, so an end
        // inside a page (a tail plus a stretch) would stop paging ahead for good.
        let end = end_bytes.next_multiple_of(page_bytes()).min(len);
        let mut at = self.populated.load(Ordering::Relaxed);
        let mut retries_left = 8u32;
        while at < end {
            let n = POPULATE_CHUNK_BYTES.min(end - at);
            // Safety: [at, at + n) lies inside the mapping, which lives as long as
            // self; MADV_POPULATE_WRITE faults pages in writable without changing
            // their contents, so the producer may be writing records there meanwhile.
            let r = unsafe {
                libc::madvise(
                    self.region.ptr.add(at as usize) as *mut libc::c_void,
                    n as usize,
                    libc::MADV_POPULATE_WRITE,
                )
            };
            if r != 0 {
                // EINTR and EAGAIN are a busy machine's, not a refusal: look
                // again, a few times; anything else ends paging
                // ahead for good (the kernel lacks it, or memory is short).
                let e = std::io::Error::last_os_error().raw_os_error();
                if matches!(e, Some(libc::EINTR) | Some(libc::EAGAIN)) && retries_left > 0 {
                    retries_left -= 1;
                    continue;
                }
                self.populated.store(len, Ordering::Relaxed);
                return false;
            }
            at += n;
            self.populated.store(at, Ordering::Relaxed);
        }
        at < len
    }

    /// One look of the pager: makes the region resident up to
    /// [`POPULATE_AHEAD_BYTES`] past the tail. Returns whether that took
    /// work (the tail moved), or None once the line needs the pager no more
    /// (the whole region was resident once, or the producer is gone).
    /// Before the pager sleeps: asks the producer to wake it once the tail
    /// has used up a chunk of what is resident ahead of it. Returns false
    /// when the tail is there already (the pager looks again instead).
    fn pager_sleeps(&self) -> bool {
        let populated = self.populated.load(Ordering::Relaxed);
        // A lazy line (`delay_line_with`) still short of a full stretch wakes
        // the pager once its tail is three quarters of the way through what
        // is resident (its first push at the latest).
        let wake_at = if self.lazy && populated < POPULATE_AHEAD_BYTES {
            (populated / 4 * 3).max(1)
        } else {
            populated.saturating_sub(POPULATE_AHEAD_BYTES) + POPULATE_CHUNK_BYTES
        };
        self.pager_wake_at.store(wake_at, Ordering::Relaxed);
        // Pairs with nothing on the producer's side (see the module doc): a
        // push that missed the store above is followed by one that sees it.
        std::sync::atomic::fence(Ordering::SeqCst);
        self.tail.load(Ordering::Relaxed) < wake_at
    }

    fn page_step(&self) -> Option<bool> {
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        let before = self.populated.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        // A lazy line is paged ahead as far as it has carried (at least its
        // first stretch, at most a full stretch): a few stray frames (a
        // router solicitation) do not make 8 MiB resident, a flow reaches the
        // full stretch within a few wake-ups of the pager.
        let ahead = if self.lazy {
            tail.clamp(LAZY_FIRST_RESIDENT_BYTES, POPULATE_AHEAD_BYTES)
        } else {
            POPULATE_AHEAD_BYTES
        };
        // Past the first lap every page has been written.
        let want = tail.saturating_add(ahead);
        if !self.populate_to(want) || tail >= self.region.len as u64 {
            return None;
        }
        Some(self.populated.load(Ordering::Relaxed) != before)
    }
}

/// Bytes a frame of `len` takes in the line.
pub const fn record_bytes(len: usize) -> usize {
    (HEADER + len).div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

/// The writing end of a delay line, owned by the input (or node) stage.
///
/// Never blocks: a record that does not fit is refused at once, so the stage
/// can count the drop and go on. Dropping it closes the line
/// ([`Producer::close`]).
pub struct Producer {
    shared: Arc<Shared>,
    cap: u64,
    tail: u64,
    head_cache: u64,
}

impl Producer {
    /// Size of the line in bytes: the requested capacity rounded up to a
    /// multiple of 2 MiB (one huge page). Records take [`record_bytes`] each,
    /// so the frames it holds at once sum to less than this.
    pub fn capacity_bytes(&self) -> u64 {
        self.cap
    }

    /// Whether the line sits on reserved (hugetlbfs) 2 MiB pages; false
    /// means ordinary pages with transparent huge pages advised. Reported in
    /// the stats, since a line of gigabytes on 4 KiB pages costs TLB misses.
    pub fn uses_huge_pages(&self) -> bool {
        self.shared.region.huge
    }

    /// Bytes from the start of the line made resident ahead of need so far.
    pub fn populated_bytes(&self) -> u64 {
        self.shared.populated.load(Ordering::Relaxed)
    }

    /// Stores a frame to be released at `release_ns`. Returns false, storing
    /// nothing, when the line has no room: the caller counts a backpressure drop.
    /// Never blocks. `copy` marks the extra copy made by `duplicate`, so that
    /// counts can tell packets from copies.
    #[inline]
    pub fn push(&mut self, release_ns: u64, frame: &[u8], copy: bool) -> bool {
        self.push_with(release_ns, frame.len(), copy, |slot| {
            slot.copy_from_slice(frame)
        })
    }

    /// Stores a record of `len` bytes written by `fill` straight into the line
    /// (which may then change it in place: finish a checksum, flip a bit), so
    /// a frame is copied once. Same contract as [`Producer::push`]; `fill` is
    /// not called when there is no room.
    #[inline]
    pub fn push_with(
        &mut self,
        release_ns: u64,
        len: usize,
        copy: bool,
        fill: impl FnOnce(&mut [u8]),
    ) -> bool {
        self.push_with_group(release_ns, len, copy, 0, fill)
    }

    /// [`Producer::push_with`] for a record of `group` (0..=[`MAX_GROUP`],
    /// given back in [`Head::group`]): the node stage's pipe of the packet,
    /// so that the packets of a deleted pipe can be told apart.
    #[inline]
    pub fn push_with_group(
        &mut self,
        release_ns: u64,
        len: usize,
        copy: bool,
        group: u32,
        fill: impl FnOnce(&mut [u8]),
    ) -> bool {
        let flags = if copy { FLAG_COPY } else { 0 };
        self.push_record(release_ns, len, flags, group, fill)
    }

    /// [`Producer::push_with_group`] of a record (not a copy) whose frame
    /// `fill` leaves with an L4 checksum computed by the producer and not
    /// changed since (given back in [`Head::checksummed`]): a reader that
    /// would verify it may trust it instead.
    #[inline]
    pub fn push_checksummed(
        &mut self,
        release_ns: u64,
        len: usize,
        group: u32,
        fill: impl FnOnce(&mut [u8]),
    ) -> bool {
        self.push_record(release_ns, len, FLAG_CHECKSUMMED, group, fill)
    }

    /// Stores the super-frame `frame` whole, to be released at `release_ns`
    /// and sent with `whole.offload`, for the `whole.wire_frames` wire frames
    /// it stands for (given back in [`Head::whole`]); otherwise as
    /// [`Producer::push_with_group`] for a record that is not a copy.
    #[inline]
    pub fn push_whole(&mut self, release_ns: u64, group: u32, whole: Whole, frame: &[u8]) -> bool {
        let len = WHOLE_PREFIX_BYTES + frame.len();
        self.push_record(release_ns, len, FLAG_WHOLE, group, |slot| {
            let (prefix, rest) = slot.split_at_mut(WHOLE_PREFIX_BYTES);
            prefix[..VIRTIO_NET_HDR_BYTES].copy_from_slice(&whole.offload.to_virtio_net_hdr(0));
            prefix[VIRTIO_NET_HDR_BYTES..12].fill(0);
            prefix[12..16].copy_from_slice(&whole.wire_frames.to_ne_bytes());
            rest.copy_from_slice(frame);
        })
    }

    #[inline]
    fn push_record(
        &mut self,
        release_ns: u64,
        len: usize,
        flags: u32,
        group: u32,
        fill: impl FnOnce(&mut [u8]),
    ) -> bool {
        let need = record_bytes(len) as u64;
        let offset = self.tail % self.cap;
        let skip = if offset + need > self.cap {
            self.cap - offset
        } else {
            0
        };
        if need + skip > self.cap {
            return false;
        }
        if self.tail + skip + need - self.head_cache > self.cap {
            self.head_cache = self.shared.head.load(Ordering::Acquire);
            if self.tail + skip + need - self.head_cache > self.cap {
                return false;
            }
        }
        let base = self.shared.region.ptr;
        if skip > 0 {
            // Safety: offset < cap and offset is 64-aligned, so a header fits; the
            // consumer has released these bytes (checked against head above).
            unsafe { write_header(base.add(offset as usize), 0, 0, FLAG_SKIP) };
            self.tail += skip;
        }
        let at = (self.tail % self.cap) as usize;
        // Safety: [at, at + need) lies inside the region (no record crosses the
        // end) and is free (tail + need - head ≤ cap); the consumer reads none of
        // it until the tail store below, so the slice is ours alone meanwhile.
        let slot = unsafe {
            write_header(
                base.add(at),
                release_ns,
                len as u32,
                flags | (group.min(MAX_GROUP) << GROUP_SHIFT),
            );
            std::slice::from_raw_parts_mut(base.add(at + HEADER), len)
        };
        fill(slot);
        self.tail += need;
        self.shared.tail.store(self.tail, Ordering::Release);
        if self.tail >= self.shared.pager_wake_at.load(Ordering::Relaxed) {
            self.wake_pager();
        }
        true
    }

    /// The tail reached the sleeping pager's mark: wakes it, once.
    #[cold]
    fn wake_pager(&self) {
        if self.shared.pager_wake_at.swap(u64::MAX, Ordering::Relaxed) != u64::MAX {
            wake_pager();
        }
    }

    /// Tells the consumer that no more frames will come.
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        // A sleeping pager lets go of the line.
        if self.shared.pager_wake_at.load(Ordering::Relaxed) != u64::MAX {
            wake_pager();
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.close();
    }
}

/// # Safety
/// `p` must point to at least HEADER writable bytes, 8-aligned.
unsafe fn write_header(p: *mut u8, release_ns: u64, len: u32, flags: u32) {
    // Safety: the caller gives HEADER (16) writable 8-aligned bytes at p: the
    // u64 at 0 and the u32s at 8 and 12 lie inside them, aligned.
    unsafe {
        (p as *mut u64).write(release_ns);
        (p.add(8) as *mut u32).write(len);
        (p.add(12) as *mut u32).write(flags);
    }
}

/// A frame at the head of the line.
#[derive(Debug)]
pub struct Head<'a> {
    /// When the frame is to be sent, in CLOCK_REALTIME ns, as the producer
    /// stored it. Records come out in the order they were stored, which is
    /// release order only when the producer stored them so.
    pub release_ns: u64,
    /// The frame's bytes inside the line: valid until [`Consumer::pop`].
    pub frame: &'a [u8],
    /// The extra copy made by `duplicate` (counted apart from packets).
    pub copy: bool,
    /// The record's group (0 unless stored with [`Producer::push_with_group`]).
    pub group: u32,
    /// A super-frame stored whole ([`Producer::push_whole`]): `frame` is it,
    /// without the prefix.
    pub whole: Option<Whole>,
    /// Stored with [`Producer::push_checksummed`]: the frame's L4 checksum
    /// was computed by the producer and the frame not changed since.
    pub checksummed: bool,
    /// Already given its end by [`Consumer::discard_where`].
    pub discarded: bool,
}

/// What a super-frame stored whole is sent with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Whole {
    /// Its offload, for the send port ([`crate::port::TxPort::tx_send_super`]).
    pub offload: Offload,
    /// The wire frames it stands for: each was given to the model and is
    /// counted as sent, late or flushed.
    pub wire_frames: u32,
}

/// The reading end of a delay line, owned by the output stage: looks at the
/// oldest record ([`Consumer::peek`]) and frees it once sent or dropped
/// ([`Consumer::pop`]). Never blocks; waiting for data is the caller's job.
pub struct Consumer {
    shared: Arc<Shared>,
    cap: u64,
    head: u64,
    tail_cache: u64,
}

impl Consumer {
    /// The next frame in line, if any.
    #[inline]
    pub fn peek(&mut self) -> Option<Head<'_>> {
        loop {
            if self.head == self.tail_cache {
                self.tail_cache = self.shared.tail.load(Ordering::Acquire);
                if self.head == self.tail_cache {
                    return None;
                }
            }
            match self.record_at(self.head) {
                Err(skip) => self.head += skip,
                // Safety: head < tail: a complete record published by the
                // producer (Release store of tail after writing it, Acquire
                // load above) starts there.
                Ok(at) => return Some(unsafe { self.head_at(at) }),
            }
        }
    }

    /// The record at byte count `pos` (< tail): `Ok(offset)` of a record,
    /// `Err(bytes)` of a skip record to pass over.
    fn record_at(&self, pos: u64) -> Result<usize, u64> {
        let at = (pos % self.cap) as usize;
        // Safety: pos < tail, so a published record header starts at `at`.
        let flags = unsafe { (self.shared.region.ptr.add(at + 12) as *const u32).read() };
        if flags & FLAG_SKIP != 0 {
            return Err(self.cap - at as u64);
        }
        Ok(at)
    }

    /// # Safety
    /// A published, unconsumed record (not a skip) starts at offset `at`.
    unsafe fn head_at(&self, at: usize) -> Head<'_> {
        let base = self.shared.region.ptr;
        // Safety: the caller's record header and frame lie inside the region.
        let (release_ns, len, flags) = unsafe {
            let p = base.add(at);
            (
                (p as *const u64).read(),
                (p.add(8) as *const u32).read(),
                (p.add(12) as *const u32).read(),
            )
        };
        // Safety: the record's frame bytes follow its header inside the region.
        let mut frame = unsafe { std::slice::from_raw_parts(base.add(at + HEADER), len as usize) };
        let whole = if flags & FLAG_WHOLE != 0 {
            let (prefix, rest) = frame.split_at(WHOLE_PREFIX_BYTES);
            frame = rest;
            let mut hdr = [0u8; VIRTIO_NET_HDR_BYTES];
            hdr.copy_from_slice(&prefix[..VIRTIO_NET_HDR_BYTES]);
            let wire_frames = u32::from_ne_bytes([prefix[12], prefix[13], prefix[14], prefix[15]]);
            // Written by `push_whole` from an offload it read back: a
            // header that does not read is memory gone wrong; the
            // frame then leaves as it is.
            Offload::from_virtio_net_hdr(hdr).ok().map(|offload| Whole {
                offload,
                wire_frames,
            })
        } else {
            None
        };
        Head {
            release_ns,
            frame,
            copy: flags & FLAG_COPY != 0,
            group: flags >> GROUP_SHIFT,
            whole,
            checksummed: flags & FLAG_CHECKSUMMED != 0,
            discarded: flags & FLAG_DISCARDED != 0,
        }
    }

    /// Offers every record stored and not yet taken, not discarded before,
    /// to `f`, oldest first; a record for which `f` returns true is marked
    /// discarded: [`Consumer::peek`] still returns it at its turn (its
    /// space is freed in order), with `discarded` set. For ending records
    /// before their release (a deleted pipe's, whose packets a kernel holds).
    pub fn discard_where(&mut self, mut f: impl FnMut(&Head<'_>) -> bool) {
        self.tail_cache = self.shared.tail.load(Ordering::Acquire);
        let mut pos = self.head;
        while pos < self.tail_cache {
            let at = match self.record_at(pos) {
                Err(skip) => {
                    pos += skip;
                    continue;
                }
                Ok(at) => at,
            };
            // Safety: head <= pos < tail: a published record starts at `at`.
            let h = unsafe { self.head_at(at) };
            let discard = !h.discarded && f(&h);
            // Safety: as above; the stored length counts a whole record's prefix.
            let len = unsafe { (self.shared.region.ptr.add(at + 8) as *const u32).read() };
            if discard {
                // Safety: the record is published and not consumed: the
                // producer never writes it again and only this consumer reads
                // it, so its flags word may change here.
                unsafe {
                    let p = self.shared.region.ptr.add(at + 12) as *mut u32;
                    p.write(p.read() | FLAG_DISCARDED);
                }
            }
            pos += record_bytes(len as usize) as u64;
        }
    }

    /// Releases the frame last returned by `peek`.
    #[inline]
    pub fn pop(&mut self) {
        let at = (self.head % self.cap) as usize;
        // Safety: called after a successful peek, so a record header is at `at`.
        let len = unsafe { (self.shared.region.ptr.add(at + 8) as *const u32).read() };
        self.head += record_bytes(len as usize) as u64;
        self.shared.head.store(self.head, Ordering::Release);
    }

    /// True once the producer is gone and everything it stored was consumed.
    pub fn is_finished(&mut self) -> bool {
        self.shared.closed.load(Ordering::Acquire) && self.peek().is_none()
    }

    /// Bytes stored and not yet consumed.
    pub fn occupied_bytes(&self) -> u64 {
        self.shared.tail.load(Ordering::Acquire) - self.head
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod group_tests;

#[cfg(test)]
mod whole_tests;

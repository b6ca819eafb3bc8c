//! The receive half: one fill ring and one rx ring per receive queue, all
//! polled by one thread.
//!
//! Every queue's socket has its own UMEM and rings, so the queues share
//! nothing the kernel writes; the one receiving thread takes frames from
//! all of them. Within a batch it takes, from all queues, always the frame
//! the XDP hook stamped first, so frames leave in the order they reached
//! the interface (up to frames a queue had not published yet when the
//! batch began). The link behind them stays one link: one queue, one rate.
//!
//! A frame larger than one UMEM frame arrives, on a socket bound with
//! `XDP_USE_SG`, as several descriptors, all but the last flagged
//! `XDP_PKT_CONTD`; it is gathered into one buffer before the callback.
//! The XDP metadata (the stamp) is in front of the first part only.
//!
//! The callback gets the frame mutably, in place in the UMEM: the frame
//! belongs to user space from its rx descriptor until it goes back on the
//! fill ring, so it can be finished (checksums) without a copy.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr;
use std::sync::Arc;

use super::ring::{Consumer, Producer};
use super::umem::Frames;
use super::{kernel_stats, Shared, XdpInfo, XdpKernelStats, META_LEN};
use crate::bpf::RxClock;
use crate::sys::clock_ns;

/// Counters of the receive half (all queues).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpRxStats {
    /// Frames handed to the [`XdpRx::rx_batch`] callback.
    pub packets: u64,
    /// Their lengths summed, in bytes (whole Ethernet frames, without the
    /// XDP metadata).
    pub bytes: u64,
    /// Frames that carried no stamp (ts_ns 0).
    pub unstamped: u64,
    /// Descriptors pointing outside the receive frames (never expected).
    pub invalid_descs: u64,
    /// Frames that came in several buffers (larger than a UMEM frame).
    pub multi_buffer: u64,
}

/// One queue's socket, as the receiving thread sees it.
pub(super) struct RxQueue {
    pub(super) fd: RawFd,
    pub(super) fill: Producer<u64>,
    pub(super) rx: Consumer<libc::xdp_desc>,
    pub(super) frames: Frames,
    /// Receive frames are the UMEM offsets below this.
    pub(super) rx_frames_end: u64,
    /// Received frames the fill ring had no room for yet (never expected).
    pub(super) unfilled: Vec<u64>,
}

/// What became of the descriptors at the head of a queue.
enum Took {
    /// A whole frame, of this many descriptors, went to the callback.
    Frame(u32),
    /// This many descriptors were unusable and were skipped.
    Invalid(u32),
    /// A multi-buffer frame whose last part is not published yet.
    Incomplete,
}

impl RxQueue {
    /// The stamp in front of the `i`-th available descriptor (0 if none).
    fn stamp_at(&self, i: u32) -> u64 {
        let d = self.rx.get(i);
        if !self.first_part_ok(d.addr, d.len as u64) {
            return 0;
        }
        // Safety: addr - 8 .. addr lies in the same UMEM frame (checked);
        // the frame belongs to user space while its descriptor is unreleased.
        unsafe {
            (self
                .frames
                .base
                .as_ptr()
                .add(d.addr as usize - META_LEN as usize) as *const u64)
                .read_unaligned()
        }
    }

    fn part_ok(&self, addr: u64, len: u64) -> bool {
        self.frames.holds(addr, len) && self.frames.frame_of(addr) < self.rx_frames_end
    }

    /// A first part also has room for the stamp in front of it.
    fn first_part_ok(&self, addr: u64, len: u64) -> bool {
        self.part_ok(addr, len) && addr - self.frames.frame_of(addr) >= META_LEN
    }

    fn recycle(&mut self, addr: u64) {
        let frame = self.frames.frame_of(addr);
        // Room is certain (see the ring sizes in socket.rs); should that
        // ever fail, the frame waits for the next call.
        if !self.fill.push(frame) {
            self.unfilled.push(frame);
        }
    }

    /// Puts frames that found the fill ring full back on it.
    fn refill(&mut self) {
        while let Some(&frame) = self.unfilled.last() {
            if !self.fill.push(frame) {
                break;
            }
            self.unfilled.pop();
        }
    }

    /// Hands the frame starting at the `i`-th of `avail` descriptors to `f`
    /// and recycles its buffers.
    fn take(
        &mut self,
        i: u32,
        avail: u32,
        scratch: &mut Vec<u8>,
        clock: &mut TsClock,
        f: &mut impl FnMut(&mut [u8], u32, u64),
    ) -> Took {
        let mut parts = 0;
        loop {
            if i + parts >= avail {
                return Took::Incomplete;
            }
            let d = self.rx.get(i + parts);
            parts += 1;
            if d.options & libc::XDP_PKT_CONTD == 0 {
                break;
            }
        }
        if parts == 1 {
            return self.take_single(self.rx.get(i), clock, f);
        }
        // Rare (frames above a UMEM frame): a small allocation is fine.
        let descs: Vec<libc::xdp_desc> = (0..parts).map(|k| self.rx.get(i + k)).collect();
        let first = descs[0];
        let valid = self.first_part_ok(first.addr, first.len as u64)
            && descs[1..]
                .iter()
                .all(|d| self.part_ok(d.addr, d.len as u64));
        if !valid {
            for d in &descs {
                if self.part_ok(d.addr, 0) {
                    self.recycle(d.addr);
                }
            }
            return Took::Invalid(parts);
        }
        let raw_ts = self.take_stamp(first.addr);
        let ts = clock.realtime_ns(raw_ts);
        scratch.clear();
        for d in &descs {
            // Safety: each part lies in one receive frame (checked), owned
            // by user space until recycled below.
            scratch.extend_from_slice(unsafe {
                std::slice::from_raw_parts(
                    self.frames.base.as_ptr().add(d.addr as usize),
                    d.len as usize,
                )
            });
            self.recycle(d.addr);
        }
        let len = scratch.len() as u32;
        f(scratch, len, ts);
        Took::Frame(parts)
    }

    /// A frame in one buffer, handed over in place.
    fn take_single(
        &mut self,
        d: libc::xdp_desc,
        clock: &mut TsClock,
        f: &mut impl FnMut(&mut [u8], u32, u64),
    ) -> Took {
        if !self.first_part_ok(d.addr, d.len as u64) {
            if self.part_ok(d.addr, 0) {
                self.recycle(d.addr);
            }
            return Took::Invalid(1);
        }
        let raw_ts = self.take_stamp(d.addr);
        let ts = clock.realtime_ns(raw_ts);
        // Safety: addr .. addr + len lies in one receive frame (checked),
        // owned by user space until recycled below; nothing else refers to
        // it meanwhile.
        let data = unsafe {
            std::slice::from_raw_parts_mut(
                self.frames.base.as_ptr().add(d.addr as usize),
                d.len as usize,
            )
        };
        f(data, d.len, ts);
        self.recycle(d.addr);
        Took::Frame(1)
    }

    /// Reads and clears the stamp in front of a first part: a later frame
    /// in this slot without metadata must not inherit it.
    fn take_stamp(&mut self, addr: u64) -> u64 {
        // Safety: addr - 8 .. addr lies in the same receive frame (checked
        // by the caller), owned by user space until recycled.
        unsafe {
            let meta = self
                .frames
                .base
                .as_ptr()
                .add(addr as usize - META_LEN as usize) as *mut u64;
            let raw = meta.read_unaligned();
            meta.write_unaligned(0);
            raw
        }
    }
}

/// The receive half: every queue's fill and rx rings and receive frames.
pub struct XdpRx {
    /// The kernel path whose gate the XDP program reads, if it opened.
    pub(super) kernel: Option<crate::kernel_path::Kernel>,
    pub(super) shared: Arc<Shared>,
    pub(super) queues: Vec<RxQueue>,
    pub(super) clock: TsClock,
    /// Where multi-buffer frames are gathered.
    pub(super) scratch: Vec<u8>,
    pub(super) stats: XdpRxStats,
    /// Per queue, during a batch: descriptors available, and taken.
    pub(super) avail: Vec<u32>,
    pub(super) taken: Vec<u32>,
}

// Safety: XdpRx is the only user-space accessor of the fill and rx rings and
// of the receive frames of every queue; the transmit half touches only the
// other rings and frames; the mappings live in the Arc'd Shared as long as
// either half.
unsafe impl Send for XdpRx {}

impl XdpRx {
    /// Calls `f(frame, len, ts_ns)` on each of up to `max` received frames,
    /// from all queues, earliest stamp first; `ts_ns` is the XDP hook's
    /// stamp in CLOCK_REALTIME ns (0 if the frame has none). `frame` may be
    /// changed in place. Each frame goes back to the kernel right after.
    /// Never blocks. Returns the number of frames.
    pub fn rx_batch(
        &mut self,
        max: usize,
        mut f: impl FnMut(&mut [u8], u32, u64),
    ) -> io::Result<usize> {
        let max32 = max.min(u32::MAX as usize) as u32;
        for (q, queue) in self.queues.iter_mut().enumerate() {
            self.avail[q] = queue.rx.available(max32);
            self.taken[q] = 0;
        }
        let mut n = 0;
        while n < max {
            let Some(q) = self.earliest() else { break };
            let queue = &mut self.queues[q];
            match queue.take(
                self.taken[q],
                self.avail[q],
                &mut self.scratch,
                &mut self.clock,
                &mut |data, len, ts| {
                    self.stats.packets += 1;
                    self.stats.bytes += len as u64;
                    f(data, len, ts)
                },
            ) {
                Took::Frame(parts) => {
                    self.taken[q] += parts;
                    n += 1;
                    if parts > 1 {
                        self.stats.multi_buffer += 1;
                    }
                }
                Took::Invalid(parts) => {
                    self.taken[q] += parts;
                    self.stats.invalid_descs += parts as u64;
                }
                Took::Incomplete => self.avail[q] = self.taken[q],
            }
        }
        for (q, queue) in self.queues.iter_mut().enumerate() {
            queue.rx.release(self.taken[q]);
            queue.refill();
            queue.fill.publish();
        }
        self.stats.unstamped = self.clock.unstamped;
        Ok(n)
    }

    /// The queue whose next frame was stamped first.
    fn earliest(&self) -> Option<usize> {
        if self.queues.len() == 1 {
            return (self.taken[0] < self.avail[0]).then_some(0);
        }
        (0..self.queues.len())
            .filter(|&q| self.taken[q] < self.avail[q])
            .min_by_key(|&q| self.queues[q].stamp_at(self.taken[q]))
    }

    /// Readies a wait on the sockets: true when a frame is already waiting;
    /// otherwise refills and wakes the driver where it asked for it
    /// (need_wakeup on the fill ring) and appends every queue's socket to
    /// `fds`, to be polled for POLLIN (by [`XdpRx::wait_rx`], or with other
    /// sockets by the caller).
    pub fn prepare_wait(&mut self, fds: &mut Vec<RawFd>) -> bool {
        for queue in &mut self.queues {
            if queue.rx.available(1) > 0 {
                return true;
            }
            if !queue.unfilled.is_empty() {
                queue.refill();
                queue.fill.publish();
            }
            if queue.fill.needs_wakeup() {
                // Safety: a zero-length recvfrom with null buffers only kicks the driver.
                unsafe {
                    libc::recvfrom(
                        queue.fd,
                        ptr::null_mut(),
                        0,
                        libc::MSG_DONTWAIT,
                        ptr::null_mut(),
                        ptr::null_mut(),
                    )
                };
            }
            fds.push(queue.fd);
        }
        false
    }

    /// Waits until a frame may be ready on any queue or `timeout_ns`
    /// passed: ppoll(2) on the sockets for POLLIN. Wakes the driver first
    /// where it asked for it (need_wakeup on the fill ring). An interrupted
    /// wait returns Ok.
    pub fn wait_rx(&mut self, timeout_ns: u64) -> io::Result<()> {
        let mut fds = Vec::with_capacity(self.queues.len());
        if self.prepare_wait(&mut fds) {
            return Ok(());
        }
        let mut pfds = Vec::with_capacity(fds.len());
        for fd in fds {
            pfds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let ts = libc::timespec {
            tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
        };
        // Safety: pfds and ts are valid for the call; no signal mask is given.
        let r = unsafe {
            libc::ppoll(
                pfds.as_mut_ptr(),
                pfds.len() as libc::nfds_t,
                &ts,
                ptr::null(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(())
    }

    /// What [`AfXdp::open`](super::AfXdp::open) set up: interface, queues, modes, clock.
    pub fn info(&self) -> &XdpInfo {
        &self.shared.info
    }

    /// Whether the kernel path opened.
    pub fn has_kernel_path(&self) -> bool {
        self.kernel.is_some()
    }

    /// The kernel path, if it opened ([`AfXdpConfig::kernel_path`]).
    pub fn kernel_path(&mut self) -> Option<&mut crate::kernel_path::Kernel> {
        self.kernel.as_mut()
    }

    /// This half's counters since [`AfXdp::open`](super::AfXdp::open) (a copy).
    pub fn stats(&self) -> XdpRxStats {
        self.stats
    }

    /// The kernel's counters summed over every queue's socket.
    pub fn kernel_stats(&self) -> io::Result<XdpKernelStats> {
        let mut sum = XdpKernelStats::default();
        for q in &self.queues {
            sum.add(&kernel_stats(q.fd)?);
        }
        Ok(sum)
    }

    /// Frames the kernel dropped before linkem could take them, all queues.
    /// `rx_dropped + rx_ring_full`, plus `rx_fill_ring_empty_descs` in
    /// zero-copy mode only: in copy mode the kernel counts a frame dropped
    /// for want of a fill-ring buffer in both `rx_dropped` and
    /// `rx_fill_ring_empty_descs` (`__xsk_rcv`, measured: 173 frames gave
    /// 173 in each), so adding both would count it twice.
    pub fn kernel_drops(&self) -> u64 {
        let zero_copy = self.shared.info.bind_mode == super::BindMode::ZeroCopy;
        self.kernel_stats()
            .map(|s| {
                s.rx_dropped
                    + s.rx_ring_full
                    + if zero_copy {
                        s.rx_fill_ring_empty_descs
                    } else {
                        0
                    }
            })
            .unwrap_or(0)
    }

    /// The sockets, one per queue, for an event loop.
    pub fn fds(&self) -> Vec<RawFd> {
        self.queues.iter().map(|q| q.fd).collect()
    }

    /// The first queue's socket (receive only: a poll of it never transmits).
    pub fn fd(&self) -> RawFd {
        self.shared.sockets[0].fd.as_raw_fd()
    }
}

impl fmt::Debug for XdpRx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdpRx")
            .field("info", &self.shared.info)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Turns raw stamps from the program into CLOCK_REALTIME ns.
#[derive(Debug)]
pub(super) struct TsClock {
    kind: RxClock,
    /// realtime - raw clock, in ns.
    offset_ns: i64,
    /// Raw clock at the last calibration.
    calibrated_at: u64,
    /// Frames without a stamp so far.
    unstamped: u64,
}

/// How often the offset is measured again: MONOTONIC drifts against
/// REALTIME by up to 500 ppm under NTP slewing (0.5 ms per second at worst);
/// the TAI offset changes only at a leap second.
const RECALIBRATE_NS: u64 = 1_000_000_000;

impl TsClock {
    pub(super) fn new(kind: RxClock) -> TsClock {
        let mut c = TsClock {
            kind,
            offset_ns: 0,
            calibrated_at: 0,
            unstamped: 0,
        };
        c.calibrate();
        c
    }

    fn raw_clock(&self) -> libc::clockid_t {
        match self.kind {
            RxClock::Tai => libc::CLOCK_TAI,
            RxClock::Monotonic => libc::CLOCK_MONOTONIC,
        }
    }

    fn calibrate(&mut self) {
        // Realtime read between two raw reads; the tightest of a few tries.
        let mut best = (u64::MAX, 0i64, 0u64);
        for _ in 0..4 {
            let r0 = clock_ns(self.raw_clock());
            let real = clock_ns(libc::CLOCK_REALTIME);
            let r1 = clock_ns(self.raw_clock());
            let mid = r0 / 2 + r1 / 2;
            if r1.wrapping_sub(r0) < best.0 {
                best = (r1.wrapping_sub(r0), real as i64 - mid as i64, r1);
            }
        }
        self.offset_ns = match self.kind {
            RxClock::Tai => tai_offset(best.1),
            RxClock::Monotonic => best.1,
        };
        self.calibrated_at = best.2;
    }

    /// 0 stays 0 (no stamp).
    pub(super) fn realtime_ns(&mut self, raw: u64) -> u64 {
        if raw == 0 {
            self.unstamped += 1;
            return 0;
        }
        if raw.abs_diff(self.calibrated_at) > RECALIBRATE_NS {
            self.calibrate();
        }
        raw.saturating_add_signed(self.offset_ns)
    }
}

/// realtime - TAI, measured, rounded to whole seconds: the kernel's TAI
/// offset is a whole number of seconds (0 until NTP sets it, 37 since 2017).
fn tai_offset(measured_ns: i64) -> i64 {
    const S: i64 = 1_000_000_000;
    (measured_ns + measured_ns.signum() * S / 2) / S * S
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tai_offsets_round_to_whole_seconds() {
        assert_eq!(tai_offset(-37_000_000_400), -37_000_000_000);
        assert_eq!(tai_offset(-36_999_999_700), -37_000_000_000);
        assert_eq!(tai_offset(300), 0);
        assert_eq!(tai_offset(-300), 0);
    }

    #[test]
    fn stamps_convert_to_realtime() {
        for kind in [RxClock::Tai, RxClock::Monotonic] {
            let mut c = TsClock::new(kind);
            let raw = clock_ns(c.raw_clock());
            let real = clock_ns(libc::CLOCK_REALTIME);
            let got = c.realtime_ns(raw);
            assert!(got.abs_diff(real) < 5_000_000, "{kind:?}: {got} vs {real}");
            assert_eq!(c.realtime_ns(0), 0, "no stamp stays 0");
            assert_eq!(c.unstamped, 1);
        }
    }
}

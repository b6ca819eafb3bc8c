//! The transmit half: the transmit socket's tx ring, and the completion
//! ring and transmit frames of the first queue's UMEM, which that socket
//! shares.
//!
//! Copy mode sends at most 32 frames per `sendto` kick (docs/platform.md pitfall
//! 4), so [`XdpTx::tx_flush`] kicks a few times; each descriptor is written
//! afresh with its length, so a frame recycled from the completion ring
//! never goes out with a stale or zeroed length (pitfall 5). A frame larger
//! than one UMEM frame goes out in several, all but the last flagged
//! `XDP_PKT_CONTD`, when the socket is bound with `XDP_USE_SG`.
//!
//! The send lead ([`crate::lead`]): when the UMEM has TX metadata (a veth,
//! Linux 6.8+), each frame's data starts `meta_len` bytes into its UMEM
//! frame, the kernel's metadata in front of it, as the kernel requires of
//! every descriptor then. The first frame pushed while no sample is pending
//! asks for a completion stamp (`XDP_TX_METADATA`, `XDP_TXMD_FLAGS_TIMESTAMP`);
//! the first kick after it is its send, and the stamp is read when its frame
//! comes back on the completion ring.
//!
//! What the kernel refuses after a frame was queued is counted
//! ([`XdpTx::tx_errors`]): `sendto` answers EBUSY when the device dropped
//! the frame it was handed (`NET_XMIT_DROP`; the frame is completed but not
//! sent), and `XDP_STATISTICS` counts descriptors it found invalid.

use std::fmt;
use std::io;
use std::ops::Range;
use std::ptr;
use std::sync::Arc;

use super::ring::{Consumer, Producer};
use super::umem::Frames;
use super::{kernel_stats, Shared, XdpInfo, XdpKernelStats, MAX_KICKS_PER_FLUSH};
use crate::bpf;
use linkem_core::port::TxOutcome;

/// Counters of the transmit half.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpTxStats {
    /// Frames put on the transmit ring.
    pub packets: u64,
    /// Their lengths summed, in bytes (whole Ethernet frames).
    pub bytes: u64,
    /// Frames refused by [`XdpTx::tx_push`] as larger than the interface carries.
    pub too_big: u64,
    /// Frames sent in several UMEM frames.
    pub multi_buffer: u64,
    /// UMEM frames whose completion came back.
    pub completed: u64,
    /// `sendto` kicks made.
    pub kicks: u64,
    /// Kicks answered by EAGAIN or ENOBUFS (retried at the next flush).
    pub kicks_deferred: u64,
    /// Kicks answered by EBUSY: the device dropped one frame.
    pub dropped_by_device: u64,
    /// Completion entries pointing outside the transmit frames (never expected).
    pub invalid_completions: u64,
}

/// The transmit half.
pub struct XdpTx {
    pub(super) shared: Arc<Shared>,
    pub(super) fd: libc::c_int,
    pub(super) tx: Producer<libc::xdp_desc>,
    pub(super) comp: Consumer<u64>,
    pub(super) frames: Frames,
    /// UMEM offsets of the transmit frames.
    pub(super) tx_frames: Range<u64>,
    /// Transmit frames owned by user space, ready to fill.
    pub(super) free: Vec<u64>,
    pub(super) max_frame_bytes: usize,
    pub(super) stats: XdpTxStats,
    /// Bytes of TX metadata in front of each frame's data (0: none, no lead).
    pub(super) meta_len: u32,
    pub(super) lead: LeadProbe,
}

/// The send lead and the frame that samples it (see the module doc).
#[derive(Debug, Default)]
pub(super) struct LeadProbe {
    lead: crate::lead::SendLead,
    /// The UMEM frame that asked for a stamp, not yet completed.
    frame: Option<u64>,
    /// `CLOCK_TAI` at the first kick after it was pushed.
    sent_tai_ns: Option<u64>,
    /// That kick was deferred or refused: the frame leaves with a later
    /// one, and its stamp would count the wait.
    spoilt: bool,
}

/// Offset of `completion.tx_timestamp` in `struct xsk_tx_metadata` (after its flags).
const TX_TIMESTAMP_OFFSET: usize = 8;

// Safety: XdpTx alone touches the tx and completion rings and the transmit
// frames; the mappings outlive it through the Arc.
unsafe impl Send for XdpTx {}

impl XdpTx {
    /// Copies `frame` into free UMEM frames and puts it on the transmit
    /// ring; it leaves at the next [`tx_flush`](Self::tx_flush).
    pub fn tx_push(&mut self, frame: &[u8]) -> TxOutcome {
        if frame.len() > self.max_frame_bytes {
            self.stats.too_big += 1;
            return TxOutcome::TooBig;
        }
        let meta = self.meta_len as usize;
        let chunk = self.frames.frame_size as usize - meta;
        let parts = frame.len().div_ceil(chunk).max(1);
        if self.free.len() < parts {
            self.reclaim();
        }
        if self.free.len() < parts || (self.tx.free_at_least(parts as u32) as usize) < parts {
            return TxOutcome::NoRoom;
        }
        for (k, part) in frame.chunks(chunk).enumerate() {
            let frame_addr = self.free.pop().expect("counted above");
            let addr = frame_addr + meta as u64;
            // Safety: frame_addr is a transmit frame of frame_size bytes
            // inside the UMEM, owned by user space (on the free list: never
            // handed to the kernel, or given back through the completion
            // ring); the metadata and the part fit in it.
            unsafe {
                ptr::copy_nonoverlapping(
                    part.as_ptr(),
                    self.frames.base.as_ptr().add(addr as usize),
                    part.len(),
                );
            }
            let mut options = if k + 1 < parts {
                libc::XDP_PKT_CONTD
            } else {
                0
            };
            if k == 0 && meta > 0 && self.lead.frame.is_none() {
                // Safety: as above; the metadata lies in the frame's first
                // meta_len bytes, which the kernel reads only once the
                // descriptor is published.
                unsafe { self.ask_stamp(frame_addr) };
                self.lead.frame = Some(frame_addr);
                options |= libc::XDP_TX_METADATA;
            }
            // A fresh descriptor, length included, every time (pitfall 5).
            let desc = libc::xdp_desc {
                addr,
                len: part.len() as u32,
                options,
            };
            let pushed = self.tx.push(desc);
            debug_assert!(pushed, "ring room was checked");
        }
        if parts > 1 {
            self.stats.multi_buffer += 1;
        }
        self.stats.packets += 1;
        self.stats.bytes += frame.len() as u64;
        TxOutcome::Queued
    }

    /// Publishes the pushed frames and kicks the kernel with
    /// `sendto(fd, NULL, 0, MSG_DONTWAIT)` while the ring has unsent frames,
    /// at most a few times; reclaims completed frames. EAGAIN and ENOBUFS
    /// are not errors: what was not sent goes at the next flush.
    pub fn tx_flush(&mut self) -> io::Result<()> {
        self.tx.publish();
        self.reclaim();
        for _ in 0..MAX_KICKS_PER_FLUSH {
            if self.tx.outstanding() == 0 || !self.tx.needs_wakeup() {
                break;
            }
            self.stats.kicks += 1;
            if self.lead.frame.is_some() && self.lead.sent_tai_ns.is_none() {
                self.lead.sent_tai_ns = Some(crate::sys::clock_ns(libc::CLOCK_TAI));
            }
            // Safety: a zero-length sendto with null buffers only kicks the transmit path.
            let r = unsafe {
                libc::sendto(self.fd, ptr::null(), 0, libc::MSG_DONTWAIT, ptr::null(), 0)
            };
            if r < 0 {
                self.lead.spoilt = true;
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    // The per-call batch was used up or the device queue is busy.
                    Some(libc::EAGAIN) | Some(libc::ENOBUFS) => self.stats.kicks_deferred += 1,
                    // The device dropped the frame it was given (NET_XMIT_DROP).
                    Some(libc::EBUSY) => self.stats.dropped_by_device += 1,
                    Some(libc::EOPNOTSUPP) => {
                        return Err(self.kick_error(
                            &e,
                            " (the veth peer may need XDP or GRO on: `ethtool -K PEER gro on`)",
                        ))
                    }
                    _ => return Err(self.kick_error(&e, "")),
                }
            }
            self.reclaim();
        }
        Ok(())
    }

    fn kick_error(&self, e: &io::Error, hint: &str) -> io::Error {
        io::Error::new(
            e.kind(),
            format!(
                "sendto on '{}': {}{hint}",
                self.shared.info.ifname,
                bpf::errno_text(e)
            ),
        )
    }

    /// Writes into a transmit frame's metadata a request for its completion stamp.
    ///
    /// # Safety
    /// `frame_addr` is a transmit frame owned by user space, with `meta_len`
    /// ([`super::socket::TX_METADATA_LEN`]) bytes of metadata room.
    unsafe fn ask_stamp(&mut self, frame_addr: u64) {
        // Safety: the caller's; the UMEM frame start is 8-byte aligned.
        unsafe {
            let meta = self.frames.base.as_ptr().add(frame_addr as usize);
            ptr::write_bytes(meta, 0, self.meta_len as usize);
            ptr::write(meta as *mut u64, libc::XDP_TXMD_FLAGS_TIMESTAMP as u64);
        }
        self.lead.sent_tai_ns = None;
        self.lead.spoilt = false;
    }

    /// The sampling frame came back: its stamp (0 if the kernel wrote none)
    /// against its send, unless that send was deferred.
    fn take_stamp(&mut self, frame_addr: u64) {
        // Safety: the frame is back from the kernel (read from the completion
        // ring after its Acquire), inside the UMEM, and holds the metadata.
        let stamped_ns = unsafe {
            ptr::read_volatile(
                self.frames
                    .base
                    .as_ptr()
                    .add(frame_addr as usize + TX_TIMESTAMP_OFFSET) as *const u64,
            )
        };
        let lead = &mut self.lead;
        if let (Some(sent_ns), false, true) = (lead.sent_tai_ns, lead.spoilt, stamped_ns != 0) {
            lead.lead.observe(sent_ns, stamped_ns);
        }
        lead.frame = None;
        lead.sent_tai_ns = None;
    }

    /// The learnt send lead ([`crate::lead`]): 0 until learnt, and without
    /// TX metadata (not a veth, or a kernel before 6.8).
    pub fn send_lead_ns(&self) -> u64 {
        self.lead.lead.lead_ns()
    }

    /// Takes completed frames back from the kernel onto the free list.
    fn reclaim(&mut self) -> u32 {
        let n = self.comp.available(u32::MAX);
        for i in 0..n {
            let addr = self.frames.frame_of(self.comp.get(i));
            if self.lead.frame == Some(addr) {
                self.take_stamp(addr);
            }
            if self.tx_frames.contains(&addr) {
                self.free.push(addr);
            } else {
                self.stats.invalid_completions += 1;
            }
        }
        self.comp.release(n);
        self.stats.completed += n as u64;
        n
    }

    /// UMEM frames pushed and not yet completed by the kernel.
    pub fn in_flight(&self) -> usize {
        ((self.tx_frames.end - self.tx_frames.start) / self.frames.frame_size as u64) as usize
            - self.free.len()
    }

    /// Largest frame [`tx_push`](Self::tx_push) takes: the interface's MTU
    /// plus an Ethernet header and one VLAN tag (what a veth or the kernel's
    /// forwarding check admits), capped at one UMEM frame unless the socket
    /// sends multi-buffer frames.
    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes
    }

    /// Frames queued earlier that the kernel then refused (cumulative):
    /// device drops reported by `sendto`, and invalid descriptors.
    pub fn tx_errors(&self) -> u64 {
        self.stats.dropped_by_device + self.kernel_stats().map(|s| s.tx_invalid_descs).unwrap_or(0)
    }

    /// What [`AfXdp::open`](super::AfXdp::open) set up: interface, queues, modes, clock.
    pub fn info(&self) -> &XdpInfo {
        &self.shared.info
    }

    /// This half's counters since [`AfXdp::open`](super::AfXdp::open) (a copy).
    pub fn stats(&self) -> XdpTxStats {
        self.stats
    }

    /// The kernel's counters for the transmitting socket.
    pub fn kernel_stats(&self) -> io::Result<XdpKernelStats> {
        kernel_stats(self.fd)
    }
}

impl fmt::Debug for XdpTx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdpTx")
            .field("info", &self.shared.info)
            .field("stats", &self.stats)
            .field("free_frames", &self.free.len())
            .finish_non_exhaustive()
    }
}

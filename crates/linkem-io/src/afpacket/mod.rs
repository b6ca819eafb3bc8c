//! AF_PACKET sockets with memory-mapped TPACKET_V2 receive and transmit rings.
//!
//! This is written directly over `libc` instead of using a crate: the existing AF_PACKET
//! crates are GPL-licensed, unmaintained, or make one system call per packet. Here a batch of
//! received frames costs no system call at all (the ring is shared memory), and a batch of
//! transmitted frames costs one `send(fd, NULL, 0, MSG_DONTWAIT)`.
//!
//! TPACKET_V2 rather than V3: V3 hands frames to user space only when a whole block is
//! retired, which on this project's machines added 0.5-6 ms of receive latency. V2 hands over
//! every frame as soon as the kernel has written it.
//!
//! Setup done by [`AfPacket::open`]:
//! - `socket(AF_PACKET, SOCK_RAW, 0)` (protocol 0 so nothing is received until the bind);
//! - `PACKET_VERSION = TPACKET_V2`, `PACKET_RX_RING`, `PACKET_TX_RING` and one `mmap`
//!   covering both rings (RX first, TX after it);
//! - `PACKET_QDISC_BYPASS` (transmit straight to the driver), `PACKET_IGNORE_OUTGOING`
//!   (we do not receive our own transmissions, nor anyone else's), `PACKET_LOSS` (a malformed
//!   TX frame is skipped instead of stalling the ring);
//! - kernel software receive timestamps (`PACKET_TIMESTAMP` with
//!   `SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_RX_SOFTWARE`, plus `SO_TIMESTAMPNS` so the
//!   stack stamps frames when the device hands them over rather than when the ring is
//!   filled). Stamps are `CLOCK_REALTIME`; compare them with [`now_realtime_ns`];
//! - `bind` to the interface with `ETH_P_ALL`, and promiscuous mode through
//!   `PACKET_ADD_MEMBERSHIP` / `PACKET_MR_PROMISC` (dropped by the kernel when the socket
//!   closes, so a crash cannot leave the interface promiscuous).
//!
//! VLAN tags: veth (and most NICs) strip the 802.1Q tag into packet metadata. With
//! [`AfPacketConfig::reinsert_vlan`] (the default) the tag is written back into the frame in
//! place, in the ring's headroom, so a frame forwarded with [`AfPacket::tx_push`] is the frame
//! that was on the wire.
//!
//! Checksums and offloads: a frame received from a veth whose sender has checksum offload
//! on may carry an unfinished (partial) TCP/UDP checksum, and with segmentation offload on
//! (or GRO on this interface) it may be a 64 KiB super-frame. With
//! [`AfPacketConfig::offload`] (the default) the socket asks for the virtio-net header
//! (`PACKET_VNET_HDR`), which the kernel writes just before the frame in the ring slot (at
//! `tp_mac - 10` with TPACKET_V2, checked on Linux 6.18), and [`RxFrame::offload`] says
//! what is left to do; a frame longer than a slot is marked `TP_STATUS_COPY` in the ring
//! and queued whole on the socket (`PACKET_COPY_THRESH`), where [`AfPacket::rx_batch`]
//! reads it, so the ring stays sized for the MTU. The same socket then sends with a
//! (zeroed) virtio-net header before every frame, as the kernel expects.
//!
//! On transmit, [`GsoSender`] hands the kernel super-frames that linkem merged from wire
//! frames (`linkem_core::wire::coalesce`), each with a virtio-net header asking for
//! segmentation (`gso_type` TCPV4/TCPV6, `gso_size` the MSS) and a partial checksum.

use linkem_core::wire::{CsumPartial, Gso, GsoKind, Offload};
use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Size of `struct tpacket2_hdr` (the per-frame header for TPACKET_V2).
const TPACKET2_HDR_SIZE: usize = size_of::<libc::tpacket2_hdr>();
/// `TPACKET_ALIGN(sizeof(struct tpacket2_hdr)) + sizeof(struct sockaddr_ll)`, the kernel's
/// `tp_hdrlen` for TPACKET_V2.
const TPACKET2_HDRLEN: usize = libc::TPACKET2_HDRLEN;
const TPACKET_ALIGNMENT: usize = libc::TPACKET_ALIGNMENT;
const ETH_HLEN: usize = 14;
const VLAN_HLEN: usize = 4;
/// `sizeof(struct virtio_net_hdr)`: what `PACKET_VNET_HDR` puts before each frame.
const VNET_HDR_LEN: usize = 10;
/// Where the kernel puts the Ethernet header of a received frame, relative to the frame
/// start: `TPACKET_ALIGN(tp_hdrlen + max(maclen, 16)) + vnet_hdr_sz - maclen`
/// (net/packet/af_packet.c, `tpacket_rcv`); the virtio-net header sits just before it.
/// Frame sizes are computed for the larger (vnet header) case.
const RX_MAC_OFFSET: usize = tpacket_align(TPACKET2_HDRLEN + 16) + VNET_HDR_LEN - ETH_HLEN;
/// The longest frame the kernel hands over (a 64 KiB super-frame, headers and a tag), and
/// room for the virtio-net header before it and the tag reinserted into it.
const BIG_FRAME_BUF: usize = 65536 + 256;
/// Where the kernel reads a transmitted frame, relative to the frame start, when
/// `PACKET_TX_HAS_OFF` is not set: `tp_hdrlen - sizeof(struct sockaddr_ll)`.
const TX_DATA_OFFSET: usize = TPACKET2_HDRLEN - size_of::<libc::sockaddr_ll>();

/// Timestamp-source bits the kernel ORs into `tp_status` (on RX frames and on completed TX
/// slots alike).
const TP_STATUS_TS_MASK: u32 =
    libc::TP_STATUS_TS_SOFTWARE | libc::TP_STATUS_TS_SYS_HARDWARE | libc::TP_STATUS_TS_RAW_HARDWARE;

const fn tpacket_align(x: usize) -> usize {
    (x + TPACKET_ALIGNMENT - 1) & !(TPACKET_ALIGNMENT - 1)
}

/// Errors of [`AfPacket`], each naming the failing call and the interface.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// `if_nametoindex` failed.
    #[error("interface '{ifname}' does not exist")]
    NoSuchInterface {
        /// The interface name asked for.
        ifname: String,
    },
    /// The interface exists but is administratively down.
    #[error("interface '{ifname}' is down (bring it up with `ip link set {ifname} up`)")]
    InterfaceDown {
        /// The interface name.
        ifname: String,
    },
    /// EPERM / EACCES from a privileged call.
    #[error("{call} on '{ifname}': needs root or CAP_NET_RAW")]
    PermissionDenied {
        /// The system call that failed.
        call: &'static str,
        /// The interface name.
        ifname: String,
    },
    /// The interface MTU does not fit in one ring frame.
    #[error(
        "MTU {mtu} of '{ifname}' exceeds the {frame_size}-byte ring frame; raise --frame-size \
         (MTU {mtu} needs at least {needed} bytes)"
    )]
    MtuTooLarge {
        /// The interface name.
        ifname: String,
        /// The interface's MTU.
        mtu: u32,
        /// The configured frame size.
        frame_size: u32,
        /// The smallest frame size that would fit the MTU.
        needed: u32,
    },
    /// The configuration cannot describe a valid ring.
    #[error("invalid AF_PACKET ring configuration: {0}")]
    InvalidConfig(String),
    /// Any other failing system call.
    #[error("{call} on '{ifname}' failed: {source}")]
    Sys {
        /// The system call (and option) that failed.
        call: &'static str,
        /// The interface name.
        ifname: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

impl IoError {
    fn sys(call: &'static str, ifname: &str, source: io::Error) -> IoError {
        match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => IoError::PermissionDenied {
                call,
                ifname: ifname.to_string(),
            },
            _ => IoError::Sys {
                call,
                ifname: ifname.to_string(),
                source,
            },
        }
    }

    fn last(call: &'static str, ifname: &str) -> IoError {
        IoError::sys(call, ifname, io::Error::last_os_error())
    }
}

/// Configuration of an [`AfPacket`] socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfPacketConfig {
    /// Bytes per ring frame (header + data); a multiple of 16. 2048 fits MTU 1500.
    pub frame_size: u32,
    /// Number of frames in the receive ring (rounded up to fill whole blocks).
    pub rx_frames: u32,
    /// Number of frames in the transmit ring (rounded up to fill whole blocks).
    pub tx_frames: u32,
    /// Put the interface in promiscuous mode (needed to bridge traffic not addressed to it).
    pub promiscuous: bool,
    /// Transmit straight to the driver, skipping the qdisc layer.
    pub qdisc_bypass: bool,
    /// Write VLAN tags that the device stripped back into received frames.
    pub reinsert_vlan: bool,
    /// Receive frames. A send-only socket (false) is bound with protocol 0, so the kernel
    /// never copies received frames into its ring: a bridge opens one socket per direction
    /// and interface, and a second receiving socket would double the receive work.
    pub receive: bool,
    /// Learn each received frame's offload state (`PACKET_VNET_HDR`: checksum left to
    /// finish, super-frame to cut; [`RxFrame::offload`]) and take frames longer than a ring
    /// slot whole (`PACKET_COPY_THRESH`: the kernel queues them on the socket, and
    /// [`AfPacket::rx_batch`] reads them there). Receive sockets only.
    pub offload: bool,
}

impl Default for AfPacketConfig {
    fn default() -> Self {
        AfPacketConfig {
            frame_size: 2048,
            rx_frames: 4096,
            tx_frames: 1024,
            promiscuous: true,
            qdisc_bypass: true,
            reinsert_vlan: true,
            receive: true,
            offload: true,
        }
    }
}

/// Layout of one TPACKET_V2 ring: frames never straddle blocks, so frame `i` lives at
/// `(i / frames_per_block) * block_size + (i % frames_per_block) * frame_size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingGeometry {
    /// Bytes per block (a multiple of the page size).
    pub block_size: u32,
    /// Number of blocks.
    pub block_nr: u32,
    /// Bytes per frame.
    pub frame_size: u32,
    /// Number of frames (`block_nr * frames_per_block`).
    pub frame_nr: u32,
}

/// Largest block we ask for; the kernel needs physically contiguous pages per block unless
/// it falls back to vmalloc, so keep blocks modest.
const MAX_BLOCK_SIZE: usize = 1 << 17;

impl RingGeometry {
    /// Computes a ring holding at least `frames` frames of `frame_size` bytes.
    pub fn compute(
        frame_size: u32,
        frames: u32,
        page_size: usize,
    ) -> Result<RingGeometry, IoError> {
        let fs = frame_size as usize;
        if fs < TPACKET2_HDRLEN + ETH_HLEN || !fs.is_multiple_of(TPACKET_ALIGNMENT) {
            return Err(IoError::InvalidConfig(format!(
                "frame size {frame_size} must be a multiple of {TPACKET_ALIGNMENT} and at least {}",
                tpacket_align(TPACKET2_HDRLEN + ETH_HLEN)
            )));
        }
        if frames == 0 {
            return Err(IoError::InvalidConfig(
                "a ring needs at least one frame".into(),
            ));
        }
        if page_size == 0 || !page_size.is_power_of_two() {
            return Err(IoError::InvalidConfig(format!("odd page size {page_size}")));
        }
        let min_block = fs.div_ceil(page_size) * page_size;
        // Grow the block (in pages) while it stays under the cap and is not larger than the
        // whole ring needs.
        let wanted = (fs * frames as usize).div_ceil(page_size) * page_size;
        let mut block = min_block;
        while block * 2 <= MAX_BLOCK_SIZE.max(min_block) && block * 2 <= wanted {
            block *= 2;
        }
        let per_block = block / fs;
        let block_nr = (frames as usize).div_ceil(per_block);
        let frame_nr = block_nr * per_block;
        let total = block_nr * block;
        if frame_nr > u32::MAX as usize || total > (1usize << 32) {
            return Err(IoError::InvalidConfig(format!(
                "{frames} frames of {frame_size} bytes is too large a ring"
            )));
        }
        Ok(RingGeometry {
            block_size: block as u32,
            block_nr: block_nr as u32,
            frame_size,
            frame_nr: frame_nr as u32,
        })
    }

    /// Frames in one block.
    pub fn frames_per_block(&self) -> u32 {
        self.block_size / self.frame_size
    }

    /// Total bytes of the ring in the mapping.
    pub fn total_bytes(&self) -> usize {
        self.block_size as usize * self.block_nr as usize
    }

    /// Offset of frame `i` from the ring's start.
    pub fn frame_offset(&self, i: u32) -> usize {
        let fpb = self.frames_per_block();
        (i / fpb) as usize * self.block_size as usize
            + (i % fpb) as usize * self.frame_size as usize
    }

    /// Largest Ethernet frame (header included) one received frame slot can hold whole.
    pub fn rx_capacity(&self) -> usize {
        self.frame_size as usize - RX_MAC_OFFSET
    }

    /// Largest frame one transmit slot can hold.
    pub fn tx_capacity(&self) -> usize {
        self.frame_size as usize - TX_DATA_OFFSET
    }

    fn as_req(&self) -> libc::tpacket_req {
        libc::tpacket_req {
            tp_block_size: self.block_size,
            tp_block_nr: self.block_nr,
            tp_frame_size: self.frame_size,
            tp_frame_nr: self.frame_nr,
        }
    }
}

/// Smallest frame size (rounded to 16) whose slot holds a whole frame of `mtu` bytes plus
/// Ethernet header and one VLAN tag.
pub fn frame_size_for_mtu(mtu: u32) -> u32 {
    tpacket_align(RX_MAC_OFFSET + ETH_HLEN + VLAN_HLEN + mtu as usize) as u32
}

/// Checks that an interface MTU fits the configured frame size.
pub fn check_mtu(ifname: &str, mtu: u32, frame_size: u32) -> Result<(), IoError> {
    let needed = frame_size_for_mtu(mtu);
    if needed > frame_size {
        return Err(IoError::MtuTooLarge {
            ifname: ifname.to_string(),
            mtu,
            frame_size,
            needed,
        });
    }
    Ok(())
}

/// The current `CLOCK_REALTIME` in nanoseconds: the clock of [`RxFrame::ts_ns`].
pub fn now_realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// The current `CLOCK_MONOTONIC` in nanoseconds.
pub fn now_monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    // Safety: `ts` is a valid, writable timespec; clock_gettime only writes to it.
    let mut ts: libc::timespec = unsafe { zeroed() };
    // Safety: as above; the clock ids used are always supported on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The offset between `CLOCK_REALTIME` and `CLOCK_MONOTONIC`, measured once, to turn kernel
/// receive stamps (realtime) into monotonic nanoseconds. Realtime can be stepped (NTP,
/// `date -s`); re-measure after a step, or compare stamps with [`now_realtime_ns`] instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockOffset {
    /// `realtime - monotonic`, in nanoseconds.
    pub realtime_minus_monotonic_ns: i128,
}

impl ClockOffset {
    /// Measures the offset, taking the tightest of a few monotonic/realtime/monotonic
    /// brackets.
    pub fn measure() -> ClockOffset {
        let mut best: Option<(u64, i128)> = None;
        for _ in 0..8 {
            let m0 = now_monotonic_ns();
            let r = now_realtime_ns();
            let m1 = now_monotonic_ns();
            let width = m1 - m0;
            let off = r as i128 - (m0 as i128 + m1 as i128) / 2;
            if best.is_none_or(|(w, _)| width < w) {
                best = Some((width, off));
            }
        }
        ClockOffset {
            realtime_minus_monotonic_ns: best.map_or(0, |(_, o)| o),
        }
    }

    /// Converts a realtime stamp to monotonic nanoseconds.
    pub fn to_monotonic(&self, realtime_ns: u64) -> u64 {
        (realtime_ns as i128 - self.realtime_minus_monotonic_ns).max(0) as u64
    }
}

/// One received frame, valid while the callback of [`AfPacket::rx_batch`] runs.
#[derive(Debug)]
pub struct RxFrame<'a> {
    /// The frame's bytes from the Ethernet header on (VLAN tag reinserted if configured);
    /// shorter than `orig_len` when the frame did not fit the slot.
    pub data: &'a [u8],
    /// The frame's length on the wire.
    pub orig_len: u32,
    /// Kernel receive time, `CLOCK_REALTIME` nanoseconds.
    pub ts_ns: u64,
    /// The VLAN tag (TPID, TCI) the device had stripped, if any.
    pub vlan: Option<(u16, u16)>,
    /// The sender left the TCP/UDP checksum for offload (`TP_STATUS_CSUMNOTREADY`): the
    /// frame as received has an unfinished checksum and would be dropped by a receiver if
    /// forwarded as is, unless it is finished first ([`RxFrame::offload`] says where).
    pub csum_not_ready: bool,
    /// What is left to do to make the frame a wire frame (from the virtio-net header,
    /// offsets relative to `data`); empty without [`AfPacketConfig::offload`].
    pub offload: Offload,
}

impl RxFrame<'_> {
    /// True when the frame was cut to fit the ring slot.
    pub fn truncated(&self) -> bool {
        (self.data.len() as u32) < self.orig_len
    }
}

/// What [`AfPacket::tx_push`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxPush {
    /// In the TX ring; sent at the next flush.
    Queued,
    /// The ring is full: flush and offer it again.
    NoRoom,
    /// Longer than the interface sends: not queued.
    TooBig,
}

/// Counters kept by an [`AfPacket`] in user space.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AfPacketStats {
    /// Frames taken from the RX ring.
    pub rx_frames: u64,
    /// Received frames cut to fit the slot.
    pub rx_truncated: u64,
    /// Received frames with an unfinished (offloaded) checksum.
    pub rx_csum_not_ready: u64,
    /// Frames longer than a ring slot read whole from the socket queue.
    pub rx_copied: u64,
    /// Frames longer than a ring slot that the kernel could not queue whole (socket
    /// buffer full): skipped, counted as kernel drops.
    pub rx_lost_big: u64,
    /// Super-frames received (GSO/TSO from the sender, or merged by GRO).
    pub rx_gso: u64,
    /// Frames put on the TX ring (less those taken back unsent, `tx_link_down`).
    pub tx_queued: u64,
    /// TX slots the kernel has handed back.
    pub tx_completed: u64,
    /// `tx_push` calls refused because the ring was full.
    pub tx_ring_full: u64,
    /// Frames refused by `tx_push` as longer than the interface sends.
    pub tx_oversize: u64,
    /// Frames the kernel handed back unsent (`TP_STATUS_WRONG_FORMAT`).
    pub tx_wrong_format: u64,
    /// `send` calls that failed transiently (ENOBUFS, EAGAIN): frames stay queued.
    pub tx_send_errors: u64,
    /// Frames dropped unsent because the interface was down or gone when they were
    /// flushed (`send` failed with ENETDOWN, ENXIO or ENODEV): see [`AfPacket::tx_flush`].
    pub tx_link_down: u64,
    /// Flushes that made a `send` call.
    pub tx_flushes: u64,
}

/// Kernel counters read with `PACKET_STATISTICS` (which resets them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Frames the kernel passed to this socket since the last read.
    pub packets: u32,
    /// Of those, frames dropped because the RX ring was full.
    pub drops: u32,
}

/// An AF_PACKET socket bound to one interface, with TPACKET_V2 RX and TX rings.
#[derive(Debug)]
pub struct AfPacket {
    fd: RawFd,
    ifname: String,
    ifindex: u32,
    mtu: u32,
    map: NonNull<u8>,
    map_len: usize,
    rx: RingGeometry,
    tx: RingGeometry,
    rx_head: u32,
    tx_head: u32,
    tx_tail: u32,
    tx_unflushed: u32,
    reinsert_vlan: bool,
    offload: bool,
    stats: AfPacketStats,
    /// Cumulative `tp_drops` (PACKET_STATISTICS resets on each read).
    kernel_drops: u64,
    /// Where frames longer than a ring slot are read to.
    big: Vec<u8>,
}

// Safety: the socket and its mapping are owned exclusively by this value; nothing in it is
// tied to a thread. All access to the mapping goes through `&mut self` (or `&self` reads of
// kernel-written status words done atomically).
unsafe impl Send for AfPacket {}

struct FdGuard(RawFd);

impl Drop for FdGuard {
    fn drop(&mut self) {
        if self.0 >= 0 {
            // Safety: the guard owns this descriptor and closes it exactly once.
            unsafe { libc::close(self.0) };
        }
    }
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, opt: libc::c_int, val: &T) -> io::Result<()> {
    // Safety: `val` points to a live `T` of `size_of::<T>()` bytes, which the kernel only reads.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (val as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn ifreq_for(ifname: &str) -> libc::ifreq {
    // Safety: ifreq is plain old data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
        *dst = src as libc::c_char;
    }
    ifr
}

fn page_size() -> usize {
    // Safety: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// The index of `ifname` (`if_nametoindex`), never 0 (here beside
/// [`IoError`], which [`crate::ifaces`] imports from this module); a name that is empty,
/// too long, holds a NUL or names no interface is `NoSuchInterface`.
pub fn index_of(ifname: &str) -> Result<u32, IoError> {
    let no_such = || IoError::NoSuchInterface {
        ifname: ifname.to_string(),
    };
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
        return Err(no_such());
    }
    let cname = CString::new(ifname).map_err(|_| no_such())?;
    // Safety: cname is a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(cname.as_ptr()) } {
        0 => Err(no_such()),
        index => Ok(index),
    }
}

impl AfPacket {
    /// Opens an AF_PACKET socket on `ifname` with RX and TX rings; see the module docs.
    pub fn open(ifname: &str, cfg: AfPacketConfig) -> Result<AfPacket, IoError> {
        let ifindex = index_of(ifname)?;
        let page = page_size();
        let rx = RingGeometry::compute(cfg.frame_size, cfg.rx_frames, page)?;
        let tx = RingGeometry::compute(cfg.frame_size, cfg.tx_frames, page)?;

        // Protocol 0: the socket receives nothing until it is bound with ETH_P_ALL below,
        // after the ring exists, so no frame of another interface slips in.
        // Safety: plain system call with constant arguments.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(IoError::last("socket(AF_PACKET, SOCK_RAW)", ifname));
        }
        let guard = FdGuard(fd);

        // Interface state and MTU.
        let mut ifr = ifreq_for(ifname);
        // Safety: SIOCGIFFLAGS reads the name and writes the flags inside `ifr`, a valid ifreq.
        if unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr) } < 0 {
            return Err(IoError::last("ioctl(SIOCGIFFLAGS)", ifname));
        }
        // Safety: SIOCGIFFLAGS filled the `ifru_flags` member of the union.
        let flags = unsafe { ifr.ifr_ifru.ifru_flags } as libc::c_int;
        if flags & libc::IFF_UP == 0 {
            return Err(IoError::InterfaceDown {
                ifname: ifname.to_string(),
            });
        }
        let mut ifr = ifreq_for(ifname);
        // Safety: SIOCGIFMTU reads the name and writes the MTU inside `ifr`, a valid ifreq.
        if unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut ifr) } < 0 {
            return Err(IoError::last("ioctl(SIOCGIFMTU)", ifname));
        }
        // Safety: SIOCGIFMTU filled the `ifru_mtu` member of the union.
        let mtu = unsafe { ifr.ifr_ifru.ifru_mtu } as u32;
        check_mtu(ifname, mtu, cfg.frame_size)?;

        let version = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_VERSION, &version)
            .map_err(|e| IoError::sys("setsockopt(PACKET_VERSION, TPACKET_V2)", ifname, e))?;
        let one: libc::c_int = 1;
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_LOSS, &one)
            .map_err(|e| IoError::sys("setsockopt(PACKET_LOSS)", ifname, e))?;
        if cfg.qdisc_bypass {
            setsockopt(fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &one)
                .map_err(|e| IoError::sys("setsockopt(PACKET_QDISC_BYPASS)", ifname, e))?;
        }
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one)
            .map_err(|e| IoError::sys("setsockopt(PACKET_IGNORE_OUTGOING)", ifname, e))?;
        let ts_flags: libc::c_int =
            (libc::SOF_TIMESTAMPING_SOFTWARE | libc::SOF_TIMESTAMPING_RX_SOFTWARE) as libc::c_int;
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_TIMESTAMP, &ts_flags)
            .map_err(|e| IoError::sys("setsockopt(PACKET_TIMESTAMP)", ifname, e))?;
        // Turns on the stack's receive time stamping, so the stamp is taken when the device
        // hands the frame over instead of when the ring slot is filled.
        setsockopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &one)
            .map_err(|e| IoError::sys("setsockopt(SO_TIMESTAMPNS)", ifname, e))?;

        let offload = cfg.offload && cfg.receive;
        if offload {
            // Before the ring: the kernel refuses to change the header size afterwards.
            setsockopt(fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one)
                .map_err(|e| IoError::sys("setsockopt(PACKET_VNET_HDR)", ifname, e))?;
            setsockopt(fd, libc::SOL_PACKET, libc::PACKET_COPY_THRESH, &one)
                .map_err(|e| IoError::sys("setsockopt(PACKET_COPY_THRESH)", ifname, e))?;
            // Room for a burst of super-frames on the socket queue (the kernel queues a
            // frame whole only while the queue is under this). FORCE needs CAP_NET_ADMIN;
            // without it the plain option, capped by net.core.rmem_max, is the best we get.
            let bytes: libc::c_int = 8 << 20;
            if setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &bytes).is_err() {
                let _ = setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &bytes);
            }
        }
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &rx.as_req())
            .map_err(|e| IoError::sys("setsockopt(PACKET_RX_RING)", ifname, e))?;
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_TX_RING, &tx.as_req())
            .map_err(|e| IoError::sys("setsockopt(PACKET_TX_RING)", ifname, e))?;

        let map_len = rx.total_bytes() + tx.total_bytes();
        // Safety: maps the socket's rings (RX then TX, as the kernel lays them out) into fresh
        // address space chosen by the kernel; no existing memory is affected.
        let map = unsafe {
            libc::mmap(
                ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(IoError::last("mmap(PACKET_RX_RING+PACKET_TX_RING)", ifname));
        }
        let map = NonNull::new(map.cast::<u8>()).expect("mmap returned NULL without MAP_FAILED");

        // From here on `sock` owns the fd and the mapping; its Drop releases both.
        let sock = AfPacket {
            fd: guard.0,
            ifname: ifname.to_string(),
            ifindex,
            mtu,
            map,
            map_len,
            rx,
            tx,
            rx_head: 0,
            tx_head: 0,
            tx_tail: 0,
            tx_unflushed: 0,
            reinsert_vlan: cfg.reinsert_vlan,
            offload,
            stats: AfPacketStats::default(),
            kernel_drops: 0,
            big: Vec::new(),
        };
        std::mem::forget(guard);

        // Safety: sockaddr_ll is plain old data; all-zero is valid.
        let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = if cfg.receive {
            (libc::ETH_P_ALL as u16).to_be()
        } else {
            0
        };
        sll.sll_ifindex = ifindex as libc::c_int;
        // Safety: `sll` is a valid sockaddr_ll and the length passed is its size.
        let rc = unsafe {
            libc::bind(
                sock.fd,
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(IoError::last("bind(AF_PACKET)", ifname));
        }

        if cfg.promiscuous && cfg.receive {
            // Safety: packet_mreq is plain old data; all-zero is valid.
            let mut mreq: libc::packet_mreq = unsafe { zeroed() };
            mreq.mr_ifindex = ifindex as libc::c_int;
            mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
            setsockopt(
                sock.fd,
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                &mreq,
            )
            .map_err(|e| {
                IoError::sys(
                    "setsockopt(PACKET_ADD_MEMBERSHIP, PACKET_MR_PROMISC)",
                    ifname,
                    e,
                )
            })?;
        }
        Ok(sock)
    }

    /// The interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The interface MTU when the socket was opened, or at the last
    /// [`AfPacket::refresh_mtu`].
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// The receive ring's layout.
    pub fn rx_geometry(&self) -> RingGeometry {
        self.rx
    }

    /// The transmit ring's layout.
    pub fn tx_geometry(&self) -> RingGeometry {
        self.tx
    }

    /// User-space counters.
    pub fn stats(&self) -> AfPacketStats {
        self.stats
    }

    /// The socket's file descriptor, for poll/epoll (readable: RX frames waiting; writable:
    /// a TX slot free). The socket keeps ownership.
    pub fn rx_fd(&self) -> RawFd {
        self.fd
    }

    fn rx_frame_ptr(&self, i: u32) -> *mut u8 {
        // Safety: frame_offset(i) < rx.total_bytes() for i < rx.frame_nr, inside the mapping.
        unsafe { self.map.as_ptr().add(self.rx.frame_offset(i)) }
    }

    fn tx_frame_ptr(&self, i: u32) -> *mut u8 {
        // Safety: the TX ring follows the RX ring in the mapping; the offset is in bounds for
        // i < tx.frame_nr.
        unsafe {
            self.map
                .as_ptr()
                .add(self.rx.total_bytes() + self.tx.frame_offset(i))
        }
    }

    /// The shared status word at the start of a ring frame.
    ///
    /// # Safety
    /// `frame` must point at a frame of this socket's mapping, and the reference must not
    /// outlive the mapping.
    unsafe fn status<'a>(frame: *mut u8) -> &'a AtomicU32 {
        // Safety: every frame starts 16-byte aligned with `tp_status: u32`, the word the kernel
        // and we share; accessing it atomically is how the ring protocol synchronises.
        unsafe { AtomicU32::from_ptr(frame.cast::<u32>()) }
    }

    /// The socket, for a poll(2) over several sockets at once.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// True when a received frame is waiting (no system call).
    pub fn rx_ready(&self) -> bool {
        // Safety: the frame pointer comes from this socket's live mapping.
        let st = unsafe { Self::status(self.rx_frame_ptr(self.rx_head)) };
        st.load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// Hands up to `max` received frames to `f`, oldest first, returning each slot to the
    /// kernel after `f` returns. Makes no system call. Returns the number of frames.
    pub fn rx_batch(&mut self, max: usize, mut f: impl FnMut(RxFrame<'_>)) -> usize {
        let mut n = 0;
        while n < max {
            let frame = self.rx_frame_ptr(self.rx_head);
            // Safety: the frame pointer comes from this socket's live mapping, which outlives
            // this loop iteration.
            let status = unsafe { Self::status(frame) };
            let st = status.load(Ordering::Acquire);
            if st & libc::TP_STATUS_USER == 0 {
                break;
            }
            // Safety: the kernel set TP_STATUS_USER (read with Acquire above), so it has
            // finished writing this slot and will not touch it until we write
            // TP_STATUS_KERNEL; the header lies at the frame's start inside the mapping.
            let hdr = unsafe { ptr::read(frame as *const libc::tpacket2_hdr) };
            let slot = self.rx.frame_size as usize;
            let mac = hdr.tp_mac as usize;
            let vlan = if st & libc::TP_STATUS_VLAN_VALID != 0 {
                let tpid = if st & libc::TP_STATUS_VLAN_TPID_VALID != 0 && hdr.tp_vlan_tpid != 0 {
                    hdr.tp_vlan_tpid
                } else {
                    libc::ETH_P_8021Q as u16
                };
                Some((tpid, hdr.tp_vlan_tci))
            } else {
                None
            };
            let ts_ns = hdr.tp_sec as u64 * 1_000_000_000 + hdr.tp_nsec as u64;
            let csum_not_ready = st & libc::TP_STATUS_CSUMNOTREADY != 0;
            let taken = if st & libc::TP_STATUS_COPY != 0 && self.offload {
                // Longer than the slot: the whole frame waits on the socket queue, in order.
                self.take_big(vlan)
            } else if (hdr.tp_snaplen as usize) < hdr.tp_len as usize && self.offload {
                // Longer than the slot and not queued (socket buffer full): lost.
                self.stats.rx_lost_big += 1;
                None
            } else {
                // Safety: the slot is ours until the status write below (see above).
                Some(unsafe { self.take_in_slot(frame, slot, mac, &hdr, vlan) })
            };
            let Some((start, len, orig_len, offload, in_big)) = taken else {
                status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
                self.rx_head = (self.rx_head + 1) % self.rx.frame_nr;
                continue;
            };
            let data = if in_big {
                &self.big[start..start + len]
            } else {
                // Safety: [start, start + len) lies inside this frame slot (clamped to the
                // slot in take_in_slot), which stays ours until the status write below.
                unsafe { std::slice::from_raw_parts(frame.add(start), len) }
            };
            let rx = RxFrame {
                data,
                orig_len,
                ts_ns,
                vlan,
                csum_not_ready,
                offload,
            };
            if rx.truncated() {
                self.stats.rx_truncated += 1;
            }
            if rx.csum_not_ready {
                self.stats.rx_csum_not_ready += 1;
            }
            if offload.gso.is_some() {
                self.stats.rx_gso += 1;
            }
            f(rx);
            status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.rx_head = (self.rx_head + 1) % self.rx.frame_nr;
            n += 1;
        }
        self.stats.rx_frames += n as u64;
        n
    }

    /// The frame in a ring slot, its VLAN tag written back if configured: (start in the
    /// slot, length, length on the wire, offload, false).
    ///
    /// # Safety
    /// `frame` must be a ring slot of `slot` bytes handed to user space (TP_STATUS_USER)
    /// and not yet returned; `hdr` its header.
    unsafe fn take_in_slot(
        &self,
        frame: *mut u8,
        slot: usize,
        mac: usize,
        hdr: &libc::tpacket2_hdr,
        vlan: Option<(u16, u16)>,
    ) -> (usize, usize, u32, Offload, bool) {
        let mut snap = (hdr.tp_snaplen as usize).min(slot.saturating_sub(mac));
        let mut start = mac;
        let mut orig_len = hdr.tp_len;
        let mut offload = Offload::default();
        if self.offload && mac >= TPACKET2_HDR_SIZE + VNET_HDR_LEN {
            let mut vh = [0u8; VNET_HDR_LEN];
            // Safety: the header lies in this slot just before the frame, after the
            // tpacket2_hdr (checked above); read before the tag below overwrites it.
            unsafe {
                ptr::copy_nonoverlapping(
                    frame.add(mac - VNET_HDR_LEN),
                    vh.as_mut_ptr(),
                    VNET_HDR_LEN,
                )
            };
            offload = parse_vnet_hdr(&vh);
        }
        if let Some((tpid, tci)) = vlan {
            if self.reinsert_vlan && mac >= TPACKET2_HDR_SIZE + VLAN_HLEN && snap >= 12 {
                // Safety: the slot is ours (see above); both ranges lie inside this frame
                // slot, after the tpacket2_hdr; `ptr::copy` allows the overlap.
                unsafe {
                    ptr::copy(frame.add(mac), frame.add(mac - VLAN_HLEN), 12);
                    let tag = frame.add(mac - VLAN_HLEN + 12);
                    ptr::copy_nonoverlapping(tpid.to_be_bytes().as_ptr(), tag, 2);
                    ptr::copy_nonoverlapping(tci.to_be_bytes().as_ptr(), tag.add(2), 2);
                }
                start = mac - VLAN_HLEN;
                snap += VLAN_HLEN;
                orig_len += VLAN_HLEN as u32;
                offload = shift_offload(offload, VLAN_HLEN as u16);
            }
        }
        (start, snap, orig_len, offload, false)
    }

    /// Reads the frame the kernel queued whole on the socket (slot marked TP_STATUS_COPY)
    /// into `self.big`: (start in `big`, length, length, offload, true); `None` when the
    /// queue holds nothing (the frame is then lost, and counted so).
    fn take_big(&mut self, vlan: Option<(u16, u16)>) -> Option<(usize, usize, u32, Offload, bool)> {
        if self.big.is_empty() {
            self.big = vec![0u8; BIG_FRAME_BUF];
        }
        // Leave room before the virtio-net header to write a VLAN tag back.
        let at = VLAN_HLEN;
        // Safety: recv writes at most `BIG_FRAME_BUF - at` bytes into `big` past `at`.
        let n = unsafe {
            libc::recv(
                self.fd,
                self.big.as_mut_ptr().add(at).cast(),
                BIG_FRAME_BUF - at,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if n < (VNET_HDR_LEN + ETH_HLEN) as isize {
            self.stats.rx_lost_big += 1;
            return None;
        }
        let n = n as usize;
        if n > BIG_FRAME_BUF - at {
            // Longer than any frame the kernel builds: cut, so not forwardable.
            self.stats.rx_lost_big += 1;
            return None;
        }
        self.stats.rx_copied += 1;
        let mut vh = [0u8; VNET_HDR_LEN];
        vh.copy_from_slice(&self.big[at..at + VNET_HDR_LEN]);
        let mut offload = parse_vnet_hdr(&vh);
        let mut start = at + VNET_HDR_LEN;
        let mut len = n - VNET_HDR_LEN;
        if let (Some((tpid, tci)), true) = (vlan, self.reinsert_vlan) {
            self.big.copy_within(start..start + 12, start - VLAN_HLEN);
            start -= VLAN_HLEN;
            self.big[start + 12..start + 14].copy_from_slice(&tpid.to_be_bytes());
            self.big[start + 14..start + 16].copy_from_slice(&tci.to_be_bytes());
            len += VLAN_HLEN;
            offload = shift_offload(offload, VLAN_HLEN as u16);
        }
        Some((start, len, len as u32, offload, true))
    }

    /// Frames the kernel dropped before this socket could take them, cumulative: the ring
    /// was full (`tp_drops` from PACKET_STATISTICS, which resets on each read, so it is
    /// summed here), or a frame longer than a slot could not be queued whole.
    pub fn kernel_drops(&mut self) -> u64 {
        if let Ok(k) = self.kernel_stats() {
            self.kernel_drops += k.drops as u64;
        }
        self.kernel_drops + self.stats.rx_lost_big
    }

    /// Sleeps in poll(2) until a frame is waiting or `timeout` passes (`None`: no limit).
    /// Returns true when a frame is waiting. Returns at once, without a system call, when
    /// one already is. An interrupted poll returns `Ok(false)`.
    pub fn poll_rx(&self, timeout: Option<Duration>) -> Result<bool, IoError> {
        if self.rx_ready() {
            return Ok(true);
        }
        poll_rx_any(&[self], timeout).map(|r| r.is_some())
    }

    /// Reclaims TX slots the kernel has finished with; returns how many are still queued
    /// or in flight.
    fn tx_reclaim(&mut self) -> u32 {
        while self.tx_in_flight() > 0 {
            // Safety: the frame pointer comes from this socket's live mapping.
            let st = unsafe { Self::status(self.tx_frame_ptr(self.tx_tail)) }
                .load(Ordering::Acquire)
                & !TP_STATUS_TS_MASK;
            // AVAILABLE: sent (or skipped as malformed, PACKET_LOSS being on); WRONG_FORMAT
            // would only appear without PACKET_LOSS and is equally finished with. The kernel
            // ORs the TX timestamp source into the status when it hands a slot back.
            if st != libc::TP_STATUS_AVAILABLE && st != libc::TP_STATUS_WRONG_FORMAT {
                break;
            }
            if st == libc::TP_STATUS_WRONG_FORMAT {
                self.stats.tx_wrong_format += 1;
            }
            self.tx_tail = (self.tx_tail + 1) % self.tx.frame_nr;
            self.stats.tx_completed += 1;
        }
        self.tx_in_flight()
    }

    fn tx_in_flight(&self) -> u32 {
        (self.stats.tx_queued - self.stats.tx_completed) as u32
    }

    /// Bytes of a TX slot left for the frame (after the virtio-net header, if any).
    fn tx_room(&self) -> usize {
        self.tx.tx_capacity() - if self.offload { VNET_HDR_LEN } else { 0 }
    }

    /// Largest frame the interface sends: MTU + Ethernet header, 4 bytes more for a frame
    /// tagged 802.1Q (the kernel allows exactly that, `packet_extra_vlan_len_allowed`), and
    /// never more than a TX slot.
    pub fn max_frame_bytes(&self) -> usize {
        (self.mtu as usize + ETH_HLEN + VLAN_HLEN).min(self.tx_room())
    }

    /// Copies `data` (a whole Ethernet frame) into the next TX slot. [`TxPush::NoRoom`] when
    /// the ring is full ([`AfPacket::tx_flush`] frees slots); [`TxPush::TooBig`] for a frame
    /// the interface would refuse (longer than MTU + Ethernet header, + 4 if tagged 802.1Q):
    /// nothing is queued, nothing truncated. Nothing is sent until `tx_flush`.
    pub fn tx_push(&mut self, data: &[u8]) -> TxPush {
        let tagged = data.len() >= ETH_HLEN && data[12..14] == [0x81, 0x00];
        let limit = self.mtu as usize + ETH_HLEN + if tagged { VLAN_HLEN } else { 0 };
        if data.len() > limit.min(self.tx_room()) {
            self.stats.tx_oversize += 1;
            return TxPush::TooBig;
        }
        if self.tx_in_flight() == self.tx.frame_nr && self.tx_reclaim() == self.tx.frame_nr {
            self.stats.tx_ring_full += 1;
            return TxPush::NoRoom;
        }
        let frame = self.tx_frame_ptr(self.tx_head);
        let vnet = if self.offload { VNET_HDR_LEN } else { 0 };
        // Safety: the slot's status is AVAILABLE (or WRONG_FORMAT, which the kernel also
        // leaves alone), so the kernel does not read it until we set SEND_REQUEST; the data
        // fits in the slot after the header (checked against tx_capacity above).
        // With PACKET_VNET_HDR the kernel reads a virtio-net header before every transmitted
        // frame too: an all-zero one says "a finished frame, nothing to offload".
        unsafe {
            ptr::write_bytes(frame.add(TX_DATA_OFFSET), 0, vnet);
            ptr::copy_nonoverlapping(data.as_ptr(), frame.add(TX_DATA_OFFSET + vnet), data.len());
            let hdr = frame as *mut libc::tpacket2_hdr;
            ptr::addr_of_mut!((*hdr).tp_len).write((vnet + data.len()) as u32);
            ptr::addr_of_mut!((*hdr).tp_snaplen).write((vnet + data.len()) as u32);
        }
        // Safety: the frame pointer comes from this socket's live mapping.
        let status = unsafe { Self::status(frame) };
        status.store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.tx_head = (self.tx_head + 1) % self.tx.frame_nr;
        self.tx_unflushed += 1;
        self.stats.tx_queued += 1;
        TxPush::Queued
    }

    /// Asks the kernel to send every queued frame with one `send(fd, NULL, 0, MSG_DONTWAIT)`
    /// and reclaims completed slots. A transient failure (ENOBUFS, EAGAIN: the device queue
    /// was full) leaves the frames queued for the next flush and is counted in
    /// `tx_send_errors`. An interface down or gone (ENETDOWN, ENXIO, ENODEV: the kernel
    /// looked at no slot) drops the queued frames, counted in `tx_link_down`: a frame is
    /// never held for an interface that may not come back, and the ring never fills with
    /// them, so the sender neither spins nor stops; once the interface is up again, frames
    /// leave as before. Other failures are returned.
    pub fn tx_flush(&mut self) -> Result<(), IoError> {
        if self.tx_unflushed > 0 {
            self.stats.tx_flushes += 1;
            // Safety: a NULL buffer of length 0 is how a TX ring send is requested; the
            // kernel reads the frames from the mapping.
            let rc = unsafe { libc::send(self.fd, ptr::null(), 0, libc::MSG_DONTWAIT) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::ENOBUFS) | Some(libc::EAGAIN) | Some(libc::EINTR) => {
                        self.stats.tx_send_errors += 1;
                        self.tx_reclaim();
                        return Ok(());
                    }
                    Some(code) if link_down_errno(code) => {
                        self.tx_drop_queued();
                        return Ok(());
                    }
                    _ => return Err(IoError::sys("send(PACKET_TX_RING)", &self.ifname, e)),
                }
            }
            self.tx_unflushed = 0;
        }
        self.tx_reclaim();
        Ok(())
    }

    /// Takes back every slot queued (`TP_STATUS_SEND_REQUEST`) and not yet taken by the
    /// kernel, counting its frame in `tx_link_down`. Only after a `send` that failed before
    /// looking at the ring (the interface down or gone): the kernel reads TX slots only
    /// inside `send`, on this thread, so none is being read meanwhile. The kernel walks
    /// the ring from its own position, the first slot it has not taken, and stops at a
    /// slot not requested: so the queued slots (from that position to `tx_head`, all
    /// requested) are given back by moving `tx_head` back to it, not skipped, or every
    /// frame queued after them would wait for the ring to wrap round.
    fn tx_drop_queued(&mut self) {
        let mut first = self.tx_tail;
        while first != self.tx_head {
            // Safety: the frame pointer comes from this socket's live mapping.
            let st = unsafe { Self::status(self.tx_frame_ptr(first)) }.load(Ordering::Acquire);
            if st & !TP_STATUS_TS_MASK == libc::TP_STATUS_SEND_REQUEST {
                break;
            }
            first = (first + 1) % self.tx.frame_nr;
        }
        let mut i = first;
        let mut dropped = 0u64;
        while i != self.tx_head {
            // Safety: the frame pointer comes from this socket's live mapping.
            unsafe { Self::status(self.tx_frame_ptr(i)) }
                .store(libc::TP_STATUS_AVAILABLE, Ordering::Release);
            dropped += 1;
            i = (i + 1) % self.tx.frame_nr;
        }
        self.tx_head = first;
        self.stats.tx_queued -= dropped;
        self.stats.tx_link_down += dropped;
        self.tx_unflushed = 0;
        self.tx_reclaim();
    }

    /// Whether the socket's interface is gone for good (deleted, moved to another
    /// namespace, or taken with its veth peer or namespace): the kernel then unbinds the
    /// socket (`sll_ifindex` -1, what `getsockname` reports), and a new interface of the
    /// same name is another device, which this socket never reaches. An interface that
    /// is only down keeps its binding, and its frames flow again once it is up.
    pub fn interface_gone(&self) -> bool {
        // Safety: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
        let mut len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // Safety: `sll` and `len` are valid and writable; the kernel writes at most `len`.
        let rc = unsafe {
            libc::getsockname(
                self.fd,
                (&mut sll as *mut libc::sockaddr_ll).cast(),
                &mut len,
            )
        };
        rc == 0 && sll.sll_ifindex <= 0
    }

    /// Whether the interface is up (`IFF_UP`, `SIOCGIFFLAGS` by name); false when it
    /// cannot be asked.
    pub fn is_up(&self) -> bool {
        let mut ifr = ifreq_for(&self.ifname);
        // Safety: SIOCGIFFLAGS reads the name and writes the flags inside `ifr`, a valid ifreq.
        if unsafe { libc::ioctl(self.fd, libc::SIOCGIFFLAGS, &mut ifr) } < 0 {
            return false;
        }
        // Safety: SIOCGIFFLAGS filled the `ifru_flags` member of the union.
        let flags = unsafe { ifr.ifr_ifru.ifru_flags } as libc::c_int;
        flags & libc::IFF_UP != 0
    }

    /// Reads the interface's MTU again (`SIOCGIFMTU`), so that frames longer than a
    /// lowered MTU are refused by [`AfPacket::tx_push`] as too big rather than dropped by
    /// the kernel unseen; a raised MTU counts up to what a ring slot holds. Returns the
    /// MTU now; the one known stays when the interface cannot be asked (gone).
    pub fn refresh_mtu(&mut self) -> u32 {
        let mut ifr = ifreq_for(&self.ifname);
        // Safety: SIOCGIFMTU reads the name and writes the MTU inside `ifr`, a valid ifreq.
        if unsafe { libc::ioctl(self.fd, libc::SIOCGIFMTU, &mut ifr) } == 0 {
            // Safety: SIOCGIFMTU filled the `ifru_mtu` member of the union.
            let mtu = unsafe { ifr.ifr_ifru.ifru_mtu };
            if mtu > 0 {
                self.mtu = mtu as u32;
            }
        }
        self.mtu
    }

    /// Frames queued or being sent that the kernel has not handed back yet.
    pub fn tx_pending(&mut self) -> u32 {
        self.tx_reclaim()
    }

    /// Reads and clears the socket's pending error (`SO_ERROR`), e.g. ENETDOWN after the
    /// interface went down.
    pub fn take_error(&self) -> Option<io::Error> {
        let mut err: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // Safety: `err` and `len` are valid and writable; the kernel writes one int.
        let rc = unsafe {
            libc::getsockopt(
                self.fd,
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&mut err as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (rc == 0 && err != 0).then(|| io::Error::from_raw_os_error(err))
    }

    /// Reads (and resets) the kernel's receive counters.
    pub fn kernel_stats(&self) -> Result<KernelStats, IoError> {
        // Safety: tpacket_stats is plain old data; all-zero is valid.
        let mut st: libc::tpacket_stats = unsafe { zeroed() };
        let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // Safety: `st` and `len` are valid and writable; the kernel writes at most `len` bytes.
        let rc = unsafe {
            libc::getsockopt(
                self.fd,
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if rc < 0 {
            return Err(IoError::last("getsockopt(PACKET_STATISTICS)", &self.ifname));
        }
        Ok(KernelStats {
            packets: st.tp_packets,
            drops: st.tp_drops,
        })
    }
}

impl Drop for AfPacket {
    fn drop(&mut self) {
        // Safety: `map`/`map_len` describe the mapping created in `open`, unmapped exactly
        // once here; no RxFrame can outlive `&mut self` borrows, so nothing points into it.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.map_len) };
        // Safety: the socket owns `fd` and closes it exactly once.
        unsafe { libc::close(self.fd) };
    }
}

/// A send-only AF_PACKET socket without a ring that hands the kernel super-frames with
/// their offload metadata: `PACKET_VNET_HDR` on, each `sendmsg` a virtio-net header and
/// the frame (gather, no copy in user space). The kernel builds a GSO packet from the
/// header (`virtio_net_hdr_to_skb`), and the receiving host's stack handles the whole
/// super-frame once, as it would what its own GRO merged.
///
/// Why a second socket beside the TX ring's: a socket with `PACKET_TX_RING` sends only
/// from its ring (`packet_sendmsg` goes to `tpacket_snd`), whose 2 KiB slots cannot hold
/// a 64 KiB super-frame. Order with the ring: both sockets bypass the qdisc and transmit
/// in the calling thread, so frames flushed from the ring before a `send` here reach the
/// device before it.
#[derive(Debug)]
pub struct GsoSender {
    fd: RawFd,
    ifname: String,
    ifindex: u32,
    /// Super-frames the kernel took.
    pub sent: u64,
    /// `sendmsg` calls that failed transiently (ENOBUFS, EAGAIN): retried by the caller.
    pub busy: u64,
}

impl GsoSender {
    /// Opens the socket on `ifname` (protocol 0: it receives nothing).
    pub fn open(ifname: &str, qdisc_bypass: bool) -> Result<GsoSender, IoError> {
        let ifindex = index_of(ifname)?;
        // Safety: plain system call with constant arguments.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(IoError::last("socket(AF_PACKET, SOCK_RAW)", ifname));
        }
        let sock = GsoSender {
            fd,
            ifname: ifname.to_string(),
            ifindex,
            sent: 0,
            busy: 0,
        };
        let one: libc::c_int = 1;
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one)
            .map_err(|e| IoError::sys("setsockopt(PACKET_VNET_HDR)", ifname, e))?;
        if qdisc_bypass {
            setsockopt(fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &one)
                .map_err(|e| IoError::sys("setsockopt(PACKET_QDISC_BYPASS)", ifname, e))?;
        }
        // Room for a few super-frames in flight; FORCE needs CAP_NET_ADMIN.
        let bytes: libc::c_int = 4 << 20;
        if setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &bytes).is_err() {
            let _ = setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &bytes);
        }
        // Safety: sockaddr_ll is plain old data; all-zero is valid.
        let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = ifindex as libc::c_int;
        // Safety: `sll` is a valid sockaddr_ll and the length passed is its size.
        let rc = unsafe {
            libc::bind(
                fd,
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(IoError::last("bind(AF_PACKET)", ifname));
        }
        Ok(sock)
    }

    /// The interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Sends `frame` with the virtio-net header `vnet` before it. `Ok(false)` when the
    /// kernel had no room now (ENOBUFS, EAGAIN): offer it again. Any other failure
    /// (EINVAL: the kernel refused the header for this frame) is an error, and the
    /// frame was not sent.
    pub fn send(&mut self, vnet: &[u8; VNET_HDR_LEN], frame: &[u8]) -> Result<bool, IoError> {
        let iov = [
            libc::iovec {
                iov_base: vnet.as_ptr() as *mut libc::c_void,
                iov_len: VNET_HDR_LEN,
            },
            libc::iovec {
                iov_base: frame.as_ptr() as *mut libc::c_void,
                iov_len: frame.len(),
            },
        ];
        // Safety: msghdr is plain old data; all-zero is valid (no name, no control).
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = iov.len();
        // Safety: `msg` points at two iovecs over live buffers that the kernel only
        // reads during the call.
        let rc = unsafe { libc::sendmsg(self.fd, &msg, libc::MSG_DONTWAIT) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOBUFS) | Some(libc::EAGAIN) | Some(libc::EINTR) => {
                    self.busy += 1;
                    Ok(false)
                }
                _ => Err(IoError::sys("sendmsg(PACKET_VNET_HDR)", &self.ifname, e)),
            };
        }
        self.sent += 1;
        Ok(true)
    }
}

impl Drop for GsoSender {
    fn drop(&mut self) {
        // Safety: the sender owns `fd` and closes it exactly once.
        unsafe { libc::close(self.fd) };
    }
}

/// The offload state a virtio-net header describes (little-endian fields, as packet
/// sockets write them on little-endian machines: `vio_le()`). GSO types linkem cannot cut
/// (legacy UFO, unknown) give no `gso`, so such a frame is judged by its length alone.
pub fn parse_vnet_hdr(h: &[u8; VNET_HDR_LEN]) -> Offload {
    const NEEDS_CSUM: u8 = 1;
    let u16_at = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
    let (flags, gso_type, gso_size) = (h[0], h[1], u16_at(4));
    let csum = (flags & NEEDS_CSUM != 0).then(|| CsumPartial {
        start: u16_at(6),
        offset: u16_at(8),
    });
    // VIRTIO_NET_HDR_GSO_*: TCPV4 1, UDP (fragmentation) 3, TCPV6 4, UDP_L4 5; ECN 0x80.
    let kind = match gso_type & !0x80 {
        1 => Some(GsoKind::TcpV4),
        4 => Some(GsoKind::TcpV6),
        5 => Some(GsoKind::Udp),
        _ => None,
    };
    let gso = kind.filter(|_| gso_size > 0).map(|kind| Gso {
        kind,
        size: gso_size,
    });
    Offload { csum, gso }
}

/// The same offload state for a frame that grew `by` bytes at its front (a VLAN tag
/// written back after the MAC addresses).
fn shift_offload(mut o: Offload, by: u16) -> Offload {
    if let Some(c) = o.csum.as_mut() {
        c.start = c.start.saturating_add(by);
    }
    o
}

/// Whether `code`, from `send` on a packet socket, says its interface is down (ENETDOWN)
/// or gone (ENXIO: the socket lost its binding; ENODEV).
pub fn link_down_errno(code: i32) -> bool {
    matches!(code, libc::ENETDOWN | libc::ENXIO | libc::ENODEV)
}

/// Sleeps in one poll(2) until one of `socks` has a received frame waiting or `timeout`
/// passes (`None`: no limit). Returns the index of the first ready socket. Returns at once,
/// without a system call, when one already has a frame. An interrupted poll returns
/// `Ok(None)`.
pub fn poll_rx_any(
    socks: &[&AfPacket],
    timeout: Option<Duration>,
) -> Result<Option<usize>, IoError> {
    if let Some(i) = socks.iter().position(|s| s.rx_ready()) {
        return Ok(Some(i));
    }
    let mut fds: Vec<libc::pollfd> = socks
        .iter()
        .map(|s| libc::pollfd {
            fd: s.fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = match timeout {
        None => -1,
        Some(d) => d.as_millis().min(i32::MAX as u128) as libc::c_int,
    };
    // Safety: `fds` is a valid array of `fds.len()` pollfd structures.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINTR) {
            return Ok(None);
        }
        let name = socks.first().map_or("", |s| s.ifname.as_str());
        return Err(IoError::sys("poll", name, e));
    }
    if let Some(i) = socks.iter().position(|s| s.rx_ready()) {
        return Ok(Some(i));
    }
    for (i, p) in fds.iter().enumerate() {
        if p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
            // Reading SO_ERROR also clears it, so a socket whose interface bounced (ENETDOWN)
            // does not keep failing every later poll.
            let source = socks[i].take_error().unwrap_or_else(|| {
                io::Error::other(format!("socket error (revents {:#x})", p.revents))
            });
            return Err(IoError::Sys {
                call: "poll",
                ifname: socks[i].ifname.clone(),
                source,
            });
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_offsets_match_the_kernel() {
        assert_eq!(TPACKET2_HDR_SIZE, 32);
        assert_eq!(TPACKET2_HDRLEN, 52);
        // TPACKET_ALIGN(52 + 16) = 80, + 10 for the virtio-net header, − 14 for Ethernet.
        assert_eq!(RX_MAC_OFFSET, 76);
        assert_eq!(TX_DATA_OFFSET, 32);
    }

    #[test]
    fn geometry_default_is_whole_blocks() {
        let g = RingGeometry::compute(2048, 4096, 4096).unwrap();
        assert_eq!(g.block_size as usize % 4096, 0);
        assert_eq!(g.block_size % g.frame_size, 0);
        assert!(g.block_size as usize <= MAX_BLOCK_SIZE);
        assert_eq!(g.frame_nr, g.block_nr * g.frames_per_block());
        assert!(g.frame_nr >= 4096);
        assert_eq!(g.total_bytes(), 4096 * 2048);
        assert_eq!(g.frame_offset(0), 0);
        assert_eq!(g.frame_offset(1), 2048);
        assert_eq!(g.frame_offset(g.frame_nr - 1), g.total_bytes() - 2048);
        assert_eq!(g.rx_capacity(), 2048 - 76);
        assert_eq!(g.tx_capacity(), 2048 - 32);
    }

    #[test]
    fn geometry_rounds_up_and_handles_odd_frames() {
        // 3 frames of 2048 in 4 KiB pages: the ring needs 2 pages, one 8 KiB block of 4 frames.
        let g = RingGeometry::compute(2048, 3, 4096).unwrap();
        assert_eq!((g.block_size, g.block_nr, g.frame_nr), (8192, 1, 4));
        // A frame size that does not divide the block: frames never straddle blocks.
        let g = RingGeometry::compute(1536, 10, 4096).unwrap();
        assert_eq!(g.frame_nr, g.block_nr * g.frames_per_block());
        assert!(g.frame_nr >= 10);
        for i in 0..g.frame_nr {
            let off = g.frame_offset(i);
            let block_end = (off / g.block_size as usize + 1) * g.block_size as usize;
            assert!(off + 1536 <= block_end, "frame {i} straddles a block");
        }
        // Jumbo frames: a block spans several pages.
        let g = RingGeometry::compute(9216 + 128, 64, 4096).unwrap();
        assert_eq!(g.block_size as usize % 4096, 0);
        assert!(g.block_size >= g.frame_size);
    }

    #[test]
    fn geometry_rejects_bad_sizes() {
        assert!(RingGeometry::compute(2047, 16, 4096).is_err());
        assert!(RingGeometry::compute(48, 16, 4096).is_err());
        assert!(RingGeometry::compute(2048, 0, 4096).is_err());
        let e = RingGeometry::compute(2050, 16, 4096)
            .unwrap_err()
            .to_string();
        assert!(e.contains("frame size 2050"), "{e}");
    }

    #[test]
    fn mtu_check_and_message() {
        check_mtu("veth0", 1500, 2048).unwrap();
        assert!(frame_size_for_mtu(1500) <= 2048);
        let e = check_mtu("x", 9000, 2048).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("MTU 9000 of 'x' exceeds the 2048-byte ring frame; raise --frame-size"),
            "{msg}"
        );
        let needed = frame_size_for_mtu(9000);
        assert!(msg.contains(&needed.to_string()));
        check_mtu("x", 9000, needed).unwrap();
        assert!(check_mtu("x", 9000, needed - 16).is_err());
    }

    #[test]
    fn error_messages_name_call_and_interface() {
        let e = IoError::sys(
            "socket(AF_PACKET, SOCK_RAW)",
            "eth9",
            io::Error::from_raw_os_error(libc::EPERM),
        );
        assert_eq!(
            e.to_string(),
            "socket(AF_PACKET, SOCK_RAW) on 'eth9': needs root or CAP_NET_RAW"
        );
        let e = IoError::sys(
            "bind(AF_PACKET)",
            "eth9",
            io::Error::from_raw_os_error(libc::ENETDOWN),
        );
        let m = e.to_string();
        assert!(m.starts_with("bind(AF_PACKET) on 'eth9' failed:"), "{m}");
        assert_eq!(
            IoError::NoSuchInterface { ifname: "x".into() }.to_string(),
            "interface 'x' does not exist"
        );
        assert!(IoError::InterfaceDown { ifname: "x".into() }
            .to_string()
            .starts_with("interface 'x' is down"));
    }

    #[test]
    fn open_missing_interface_fails_clearly() {
        let e = AfPacket::open("nosuchif0zz", AfPacketConfig::default()).unwrap_err();
        assert_eq!(e.to_string(), "interface 'nosuchif0zz' does not exist");
        let e = AfPacket::open("this-name-is-way-too-long", AfPacketConfig::default()).unwrap_err();
        assert!(e.to_string().contains("does not exist"));
    }

    #[test]
    fn open_loopback_works_or_needs_root() {
        // lo always exists and is up; as non-root this must be the plain permission error.
        match AfPacket::open("lo", AfPacketConfig::default()) {
            Ok(_) => {}
            Err(IoError::PermissionDenied { call, ifname }) => {
                assert_eq!(ifname, "lo");
                assert!(call.starts_with("socket"));
            }
            // lo's MTU is 65536: with the default frame size that is the expected refusal.
            Err(IoError::MtuTooLarge { mtu, .. }) => assert!(mtu > 1964),
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    #[test]
    fn virtio_net_headers_as_the_kernel_writes_them() {
        // NEEDS_CSUM, TCPV4 with ECN, hdr_len 66, gso_size 1448, csum_start 34, offset 16.
        let h = [1, 0x81, 66, 0, 0xa8, 0x05, 34, 0, 16, 0];
        assert_eq!(
            parse_vnet_hdr(&h),
            Offload {
                csum: Some(CsumPartial {
                    start: 34,
                    offset: 16
                }),
                gso: Some(Gso {
                    kind: GsoKind::TcpV4,
                    size: 1448
                }),
            }
        );
        let h = [0, 4, 0, 0, 0x8c, 0x05, 0, 0, 0, 0];
        assert_eq!(parse_vnet_hdr(&h).gso.unwrap().kind, GsoKind::TcpV6);
        let h = [1, 5, 0, 0, 0xb4, 0x05, 34, 0, 6, 0];
        let o = parse_vnet_hdr(&h);
        assert_eq!(
            (o.gso.unwrap().kind, o.csum.unwrap().offset),
            (GsoKind::Udp, 6)
        );
        // DATA_VALID only, no GSO: nothing to do.
        assert_eq!(
            parse_vnet_hdr(&[2, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            Offload::default()
        );
        // Legacy UFO (3) and a zero segment size cannot be cut: judged by length alone.
        assert_eq!(
            parse_vnet_hdr(&[0, 3, 0, 0, 0xdc, 0x05, 0, 0, 0, 0]).gso,
            None
        );
        assert_eq!(parse_vnet_hdr(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 0]).gso, None);
        // A VLAN tag written back moves the checksum start, not its offset.
        let moved = shift_offload(parse_vnet_hdr(&[1, 0, 0, 0, 0, 0, 34, 0, 16, 0]), 4);
        assert_eq!(
            moved.csum,
            Some(CsumPartial {
                start: 38,
                offset: 16
            })
        );
    }

    #[test]
    fn clocks_are_consistent() {
        let off = ClockOffset::measure();
        let r = now_realtime_ns();
        let m = now_monotonic_ns();
        let conv = off.to_monotonic(r);
        assert!(conv.abs_diff(m) < 10_000_000, "conv {conv} mono {m}");
    }
}

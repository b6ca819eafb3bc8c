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
//! `tp_mac - 10` with TPACKET_V2, checked on Linux 6.18), and [`RxFrame::offload`](linkem_core::port::RxFrame::offload) says
//! what is left to do; a frame longer than a slot is marked `TP_STATUS_COPY` in the ring
//! and queued whole on the socket (`PACKET_COPY_THRESH`), where [`AfPacket::rx_batch`]
//! reads it, so the ring stays sized for the MTU. The same socket then sends with a
//! (zeroed) virtio-net header before every frame, as the kernel expects.
//!
//! On transmit, [`GsoSender`] hands the kernel super-frames that linkem merged from wire
//! frames (`linkem_core::wire::coalesce`), each with a virtio-net header asking for
//! segmentation (`gso_type` TCPV4/TCPV6, `gso_size` the MSS) and a partial checksum.

use crate::sys::setsockopt;
use linkem_core::wire::{CsumPartial, Gso, GsoKind, Offload};
use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

mod batch_tx;
mod clock;
mod gso;
pub mod port;
mod ring;
mod rx;
mod socket;
#[cfg(test)]
mod tests;
mod tx;

pub use clock::{now_monotonic_ns, now_realtime_ns, ClockOffset};
pub use gso::GsoSender;
pub use ring::{check_mtu, frame_size_for_mtu, RingGeometry};
pub use rx::{parse_vnet_hdr, poll_rx_any};
pub use tx::link_down_errno;

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

/// A ring slot's stamp (`tp_sec`, `tp_nsec`: `CLOCK_REALTIME`), ns: a received
/// frame's, or the last stamp of a sent frame the kernel handed back.
fn stamp_ns(hdr: &libc::tpacket2_hdr) -> u64 {
    u64::from(hdr.tp_sec) * 1_000_000_000 + u64::from(hdr.tp_nsec)
}

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
    /// finish, super-frame to cut; [`RxFrame::offload`](linkem_core::port::RxFrame::offload)) and take frames longer than a ring
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

/// What opening an AF_PACKET socket needs: raw sockets.
pub const NEEDED_CAPS: &[crate::caps::Cap] = &[crate::caps::Cap::NET_RAW];

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
    /// The learnt send lead ([`crate::lead`]).
    lead: crate::lead::SendLead,
    /// The TX slot sampled for the send lead, and when its `send` was called
    /// (`CLOCK_REALTIME`): the first frame of a flush, one at a time.
    lead_sample: Option<(u32, u64)>,
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

use crate::sys::ifreq as ifreq_for;

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

//! What a live front end needs from a packet port: receive batches with
//! timestamps and offload metadata, queue frames for sending, flush, and the
//! counts only the kernel knows. The traits use std types only, so the model's
//! crate names them and every port implements them where its socket lives
//! (`linkem_io::afpacket::port`, `linkem_io::afxdp::port`,
//! `linkem_io::nfqueue::port`; the in-memory test ports in `linkem-runtime`).

use crate::rules::SocketOwner;
use crate::wire::Offload;
use std::io;
use std::os::fd::RawFd;

/// A received frame, valid during the callback only.
#[derive(Debug, Clone, Copy)]
pub struct RxFrame<'a> {
    /// The bytes captured, from the Ethernet header on; borrowed from the
    /// backend's ring, so the pipeline copies what it keeps before returning.
    pub data: &'a [u8],
    /// Length on the wire (may exceed `data.len()` if the backend truncated it:
    /// such a frame cannot be forwarded whole and counts as `too-big`).
    pub orig_len: u32,
    /// Receive time in CLOCK_REALTIME ns; 0 if the backend has none (the
    /// pipeline then stamps the frame itself).
    pub ts_ns: u64,
    /// Offload metadata from the kernel (AF_PACKET with PACKET_VNET_HDR);
    /// default (nothing left to do) if none.
    pub offload: Offload,
    /// Owner of the local socket the packet belongs to, where the backend
    /// knows it (`linkem host`'s netfilter queue); `None` on the wire.
    pub owner: Option<SocketOwner>,
}

impl RxFrame<'_> {
    /// True when the backend cut the frame short (`data` shorter than `orig_len`).
    pub fn truncated(&self) -> bool {
        (self.data.len() as u32) < self.orig_len
    }
}

/// The receive half of an interface, owned by one input (or node) stage.
///
/// `Send` because a port is opened on the main thread and then moved to the
/// stage's thread, which alone uses it. No call blocks except
/// [`RxPort::wait_rx`], so a stage can keep its own deadlines.
pub trait RxPort: Send {
    /// Receives up to `max` frames, calling `f` on each; returns how many.
    /// Never blocks.
    fn rx_batch(&mut self, max: usize, f: &mut dyn FnMut(RxFrame<'_>)) -> io::Result<usize>;
    /// Blocks until a frame may be ready or `timeout_ns` has passed.
    fn wait_rx(&mut self, timeout_ns: u64) -> io::Result<()>;
    /// Frames the kernel dropped before linkem could take them (cumulative):
    /// AF_PACKET tp_drops, AF_XDP rx_dropped + rx_ring_full + rx_fill_ring_empty_descs.
    /// Called off the per-frame path (at most every few ms); may make a system call.
    fn rx_kernel_drops(&mut self) -> u64 {
        0
    }
    /// Readies one wait over several ports (the node stage takes frames from
    /// both interfaces in one thread, so it sleeps in one poll(2) on both):
    /// [`WaitFds::Ready`] when a frame is already waiting, else the sockets to
    /// poll for POLLIN are appended to `fds` (after any wake-up the backend's
    /// own `wait_rx` would do first). Default: [`WaitFds::Unsupported`], and
    /// the caller waits on each port in turn with `wait_rx`.
    fn wait_fds(&mut self, fds: &mut Vec<RawFd>) -> io::Result<WaitFds> {
        let _ = fds;
        Ok(WaitFds::Unsupported)
    }
    /// The state of the port's interface, asked when poll(2) reported an
    /// error on one of its sockets (POLLERR, POLLHUP, POLLNVAL; the error is
    /// read and cleared, so the next poll sleeps) or anything on its
    /// [`RxPort::health_fd`] (which this reads quiet), then again every
    /// [`PortHealth::Down`] check while it is down. Default:
    /// [`PortHealth::Running`] (ports without sockets).
    fn health(&mut self) -> PortHealth {
        PortHealth::Running
    }
    /// A descriptor that polls readable when the port's interface may have
    /// changed state, for a port whose own sockets hear nothing of it
    /// (AF_XDP): the stage polls it beside [`RxPort::wait_fds`]'s and asks
    /// [`RxPort::health`] when it wakes. Default: none.
    fn health_fd(&self) -> Option<RawFd> {
        None
    }
    /// Whether frames this port received that will never be sent must be
    /// handed back ([`RxPort::discard`]): true for a port that only lends
    /// them (the netfilter queue keeps each packet until a verdict names it).
    fn wants_discards(&self) -> bool {
        false
    }
    /// A frame received on this port (as it was received) that the stage
    /// will not send: dropped by the model or not stored (backpressure).
    /// Called on the stage's thread after each batch.
    fn discard(&mut self, frame: &[u8]) {
        let _ = frame;
    }
    /// The port's kernel path, if it has one (default: none).
    fn kernel_path(&mut self) -> Option<&mut dyn KernelPath> {
        None
    }
}

/// A port's kernel path ([`RxPort::kernel_path`]): the kernel itself forwards
/// the frames arriving on the port out of another interface, as the Linux
/// bridge would, in the sender's own context, and the port hands user space
/// none of them. For a direction whose model leaves every packet as it came
/// at the instant it came (a pass-through), that is the model's outcome
/// without the wake-ups a user-space forwarder costs.
pub trait KernelPath: Send {
    /// From now on, frames arriving on this port leave through
    /// `egress_ifindex` in the kernel, and user space receives none.
    fn engage(&mut self, egress_ifindex: u32) -> io::Result<()>;
    /// From now on, frames arriving on this port go to user space again.
    fn disengage(&mut self) -> io::Result<()>;
    /// A reader of what the kernel forwarded, for any thread (the counts are
    /// the kernel's: reading them does not involve the port's owner).
    fn counter(&self) -> std::sync::Arc<dyn KernelCounter>;
}

/// Reads a kernel path's counts ([`KernelPath::counter`]).
pub trait KernelCounter: Send + Sync {
    /// What the kernel forwarded since the port opened.
    fn counts(&self) -> io::Result<KernelCounts>;
}

/// What a kernel path forwarded ([`KernelPath::counts`]), cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelCounts {
    /// Packets forwarded, each a frame or a super-frame.
    pub frames: u64,
    /// Wire frames they are (a super-frame counts each of its segments).
    pub wire_frames: u64,
    /// Bytes of those wire frames, each with its headers.
    pub wire_bytes: u64,
    /// Frames dropped, not forwarded: longer than the egress MTU allows
    /// (linkem's `too-big`).
    pub too_big: u64,
}

/// The state of a port's interface ([`RxPort::health`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortHealth {
    /// Up: frames come as usual.
    Running,
    /// Set down (`ip link set dev IF down`): nothing comes until it is up
    /// again, when frames resume on the same socket; the stage asks again
    /// every [`PortHealth::DOWN_CHECK_NS`] meanwhile.
    Down,
    /// Gone for good (deleted, or its veth peer or namespace deleted): the
    /// message names the interface. The pair's link stops.
    Gone(String),
}

impl PortHealth {
    /// How often a stage asks a port that is down again: how soon after its
    /// interface is deleted the link stops, at the cost of a wake-up each
    /// time while it is down (none while it is up).
    pub const DOWN_CHECK_NS: u64 = 200_000_000;
}

/// What [`RxPort::wait_fds`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFds {
    /// A frame is waiting: do not sleep.
    Ready,
    /// The port's sockets were appended: poll them.
    Added,
    /// The port has no sockets to poll (in-memory ports).
    Unsupported,
}

/// What became of a frame offered for sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxOutcome {
    /// Queued; handed to the kernel at the next flush at the latest.
    Queued,
    /// No room now: flush and offer it again.
    NoRoom,
    /// Larger than [`TxPort::max_frame_bytes`]: never sent, never truncated.
    TooBig,
}

/// Which pipes' records a send port bounds in number, and to how many
/// ([`TxPort::max_held_per_pipe`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldBound {
    /// The pipe numbers bounded (host mode: the claims').
    pub pipes: std::ops::RangeInclusive<u32>,
    /// Records each may keep in the delay line at once.
    pub packets: u32,
}

/// The send half of an interface, owned by one output stage.
///
/// Frames are queued with [`TxPort::tx_push`] and reach the kernel at
/// [`TxPort::tx_flush`], so that a batch of releases due together costs one
/// system call. A frame counts as `delivered` once flushed, less what
/// [`TxPort::tx_errors`] later reports refused.
pub trait TxPort: Send {
    /// Queues a frame for sending.
    fn tx_push(&mut self, frame: &[u8]) -> TxOutcome;
    /// Hands the queued frames to the kernel.
    fn tx_flush(&mut self) -> io::Result<()>;
    /// Frames queued earlier that the kernel then refused (cumulative); the
    /// pipeline moves them from `delivered` to `tx-error`.
    fn tx_errors(&mut self) -> u64 {
        0
    }
    /// Largest frame this port can send (egress MTU + Ethernet header (+ tags)).
    fn max_frame_bytes(&self) -> usize;
    /// How long before its release the output stage hands a frame to this
    /// port: the time the port learnt a frame takes from the send call to
    /// the kernel's stamp of it leaving (on a veth: of it reaching the
    /// host's end), so that it leaves at its release. 0 (the default): a
    /// port that cannot learn it; frames are handed over at their release.
    fn send_lead_ns(&self) -> u64 {
        0
    }
    /// The interface this port sends out of, for another port's kernel path
    /// to forward to ([`KernelPath::engage`]); `None` (the default): a port
    /// no kernel path may send through (in memory, a netfilter queue).
    fn egress_ifindex(&self) -> Option<u32> {
        None
    }
    /// A frame due on this port that the output stage will not send (late
    /// past max-lag, or its pipe flushed): a port that only lends frames
    /// (the netfilter queue) gives it back as dropped.
    fn tx_discard(&mut self, frame: &[u8]) {
        let _ = frame;
    }
    /// Whether [`TxPort::tx_send_super`] can hand the kernel a super-frame
    /// with its offload metadata (the output stage coalesces only then).
    fn sends_super_frames(&self) -> bool {
        false
    }
    /// Sends at once, after every frame queued before it (so the port
    /// flushes those first), a super-frame merged from wire frames with the
    /// offload the kernel is to do (segmentation, checksum). `Ok(false)`:
    /// no room now, offer it again. An error means the kernel refused this
    /// super-frame: the caller sends its wire frames one by one instead.
    fn tx_send_super(&mut self, frame: &[u8], offload: Offload) -> io::Result<bool> {
        let _ = (frame, offload);
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
    /// Why this port cannot send a packet twice (a duplicate), if it cannot:
    /// a port that gives back the packet it lent (a netfilter verdict, one per
    /// packet) has no second copy to send. The live stage then refuses every
    /// change that would make its model duplicate.
    fn no_copies(&self) -> Option<&'static str> {
        None
    }

    /// `Some(bound)`: at most `bound.packets` records of one pipe numbered in
    /// `bound.pipes` wait in the delay line of this port's direction; the live
    /// stage counts a packet beyond them as backpressure. For a port that
    /// lends packets from a bounded store the kernel keeps (host mode's
    /// netfilter queue: one claim must not fill it). A port with a bound also
    /// ends a deleted pipe's records at once rather than at their release.
    fn max_held_per_pipe(&self) -> Option<HeldBound> {
        None
    }
}

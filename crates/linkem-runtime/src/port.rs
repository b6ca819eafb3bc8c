//! What the pipeline needs from a backend: receive batches with timestamps and
//! offload metadata, queue frames for sending, flush, and the counts only the
//! kernel knows (frames it dropped before linkem could take them, frames it
//! refused after linkem handed them over). AF_PACKET, AF_XDP and the in-memory
//! test ports implement it.

use linkem_core::rules::SocketOwner;
use linkem_core::wire::Offload;
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
    /// read and cleared, so the next poll sleeps), then again every
    /// [`PortHealth::Down`] check while it is down. Default:
    /// [`PortHealth::Running`] (ports without sockets).
    fn health(&mut self) -> PortHealth {
        PortHealth::Running
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

/// Threads [`close_all`] closes on at most.
const CLOSERS: usize = 16;

/// Drops `items` (ports, or what holds them) on up to 16 threads at once:
/// closing an AF_PACKET socket with rings waits for three RCU grace periods
/// in the kernel (`synchronize_net`, tens of ms each on a busy machine), and
/// the waits of several threads overlap, where one after the other they made
/// a bridge of many pairs take seconds to stop. Items left when no thread
/// can be started are dropped here.
pub fn close_all<T: Send>(mut items: Vec<T>) {
    if items.len() <= 1 {
        return;
    }
    let per = items.len().div_ceil(CLOSERS);
    std::thread::scope(|s| {
        while !items.is_empty() {
            let chunk: Vec<T> = items.drain(..per.min(items.len())).collect();
            // A thread that cannot start leaves its chunk to this one.
            let _ = std::thread::Builder::new()
                .name("linkem-close".into())
                .spawn_scoped(s, move || drop(chunk));
        }
    });
}

/// A send half that sends nothing, left in place of a port closed while its
/// output stage's state lives on ([`close_all`]).
pub struct ClosedTx;

impl TxPort for ClosedTx {
    fn tx_push(&mut self, _frame: &[u8]) -> TxOutcome {
        TxOutcome::TooBig
    }

    fn tx_flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn max_frame_bytes(&self) -> usize {
        0
    }
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

/// In-memory ports for tests: frames go in through a channel with their
/// timestamps (and offload metadata), and come out into a shared vector with
/// the time they were sent.
pub mod memory {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc::{Receiver, RecvTimeoutError};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// One frame offered to a [`MemoryRx`].
    #[derive(Debug, Clone, Default)]
    pub struct MemFrame {
        /// Receive time in CLOCK_REALTIME ns, given as [`RxFrame::ts_ns`]; 0
        /// lets the pipeline stamp the frame when it takes it, as for a
        /// backend without kernel timestamps.
        pub ts_ns: u64,
        /// The whole frame (so `orig_len` is its length: never truncated).
        pub data: Vec<u8>,
        /// Offload metadata as a backend with PACKET_VNET_HDR would report it,
        /// for tests of segmentation and checksum completion.
        pub offload: Offload,
    }

    impl From<(u64, Vec<u8>)> for MemFrame {
        fn from((ts_ns, data): (u64, Vec<u8>)) -> Self {
            MemFrame {
                ts_ns,
                data,
                offload: Offload::default(),
            }
        }
    }

    /// A receive port fed through a channel by the test: anything that turns
    /// into a [`MemFrame`] (a bare `(ts_ns, frame)` pair by default). A
    /// channel whose sender is gone behaves as an idle interface, so a test
    /// can end its input without stopping the pipeline.
    pub struct MemoryRx<T = (u64, Vec<u8>)> {
        /// Where the frames come from, in the order they are received.
        pub input: Receiver<T>,
        pending: Option<MemFrame>,
        /// What [`RxPort::rx_kernel_drops`] reports: tests set it to stand for
        /// frames a kernel dropped.
        pub kernel_drops: Arc<AtomicU64>,
    }

    impl<T: Into<MemFrame> + Send> MemoryRx<T> {
        /// A port that receives what is sent on `input`, with no kernel drops.
        pub fn new(input: Receiver<T>) -> Self {
            MemoryRx {
                input,
                pending: None,
                kernel_drops: Arc::default(),
            }
        }
    }

    impl<T: Into<MemFrame> + Send> RxPort for MemoryRx<T> {
        fn rx_batch(&mut self, max: usize, f: &mut dyn FnMut(RxFrame<'_>)) -> io::Result<usize> {
            let mut n = 0;
            while n < max {
                let Some(m) = self
                    .pending
                    .take()
                    .or_else(|| self.input.try_recv().ok().map(Into::into))
                else {
                    break;
                };
                f(RxFrame {
                    data: &m.data,
                    orig_len: m.data.len() as u32,
                    ts_ns: m.ts_ns,
                    offload: m.offload,
                    owner: None,
                });
                n += 1;
            }
            Ok(n)
        }

        fn wait_rx(&mut self, timeout_ns: u64) -> io::Result<()> {
            if self.pending.is_none() {
                match self.input.recv_timeout(Duration::from_nanos(timeout_ns)) {
                    Ok(item) => self.pending = Some(item.into()),
                    Err(RecvTimeoutError::Timeout) => {}
                    // The sender is gone: behave like an idle interface.
                    Err(RecvTimeoutError::Disconnected) => {
                        std::thread::sleep(Duration::from_nanos(timeout_ns))
                    }
                }
            }
            Ok(())
        }

        fn rx_kernel_drops(&mut self) -> u64 {
            self.kernel_drops.load(Ordering::Relaxed)
        }
    }

    /// Sent frames with the CLOCK_REALTIME ns at which they were handed over.
    pub type Sent = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

    /// Super-frames sent, each as the wire frames it carried, with the
    /// CLOCK_REALTIME ns at which it was handed over.
    pub type Supers = Arc<Mutex<Vec<(u64, Vec<Vec<u8>>)>>>;

    /// A send port that appends what it flushes to a shared vector, stamped
    /// with the flush time, so tests can check what left and when.
    pub struct MemoryTx {
        /// The frames handed over so far; the same vector
        /// [`MemoryTx::new`] returns, for a test to read after moving the
        /// port into the pipeline.
        pub sent: Sent,
        queued: Vec<Vec<u8>>,
        /// Largest frame accepted; longer ones are refused as [`TxOutcome::TooBig`].
        pub max_frame_bytes: usize,
        /// Frames for which this returns true are queued but then refused at
        /// the flush, as a kernel refuses a malformed frame: counted in
        /// [`TxPort::tx_errors`] and not sent.
        pub refuse: fn(&[u8]) -> bool,
        /// Super-frames are taken ([`TxPort::sends_super_frames`]) when
        /// this is set: each is cut back into wire frames with
        /// [`linkem_core::wire::segment`] and recorded as one entry of
        /// this vector, so a test sees which frames left merged; the wire
        /// frames also go to `sent`.
        pub supers: Option<Supers>,
        errors: u64,
    }

    impl MemoryTx {
        /// A port that sends everything up to 1514 bytes (MTU 1500).
        pub fn new() -> (Self, Sent) {
            let sent: Sent = Arc::default();
            (
                MemoryTx {
                    sent: sent.clone(),
                    queued: Vec::new(),
                    max_frame_bytes: 1514,
                    refuse: |_| false,
                    supers: None,
                    errors: 0,
                },
                sent,
            )
        }
    }

    impl TxPort for MemoryTx {
        fn tx_push(&mut self, frame: &[u8]) -> TxOutcome {
            if frame.len() > self.max_frame_bytes {
                return TxOutcome::TooBig;
            }
            self.queued.push(frame.to_vec());
            TxOutcome::Queued
        }

        fn tx_flush(&mut self) -> io::Result<()> {
            let now = crate::clock::now_ns();
            let mut sent = self
                .sent
                .lock()
                .expect("no test thread panics while holding it");
            for f in self.queued.drain(..) {
                if (self.refuse)(&f) {
                    self.errors += 1;
                } else {
                    sent.push((now, f));
                }
            }
            Ok(())
        }

        fn tx_errors(&mut self) -> u64 {
            self.errors
        }

        fn max_frame_bytes(&self) -> usize {
            self.max_frame_bytes
        }

        fn sends_super_frames(&self) -> bool {
            self.supers.is_some()
        }

        fn tx_send_super(&mut self, frame: &[u8], offload: Offload) -> io::Result<bool> {
            let Some(supers) = self.supers.clone() else {
                return Err(io::Error::from(io::ErrorKind::Unsupported));
            };
            self.tx_flush()?;
            let now = crate::clock::now_ns();
            let mut segs = Vec::new();
            linkem_core::wire::segment(frame, offload, usize::MAX, &mut |s| segs.push(s.to_vec()))
                .map_err(io::Error::other)?;
            let mut sent = self
                .sent
                .lock()
                .expect("no test thread panics while holding it");
            sent.extend(segs.iter().map(|f| (now, f.clone())));
            supers
                .lock()
                .expect("no test thread panics while holding it")
                .push((now, segs));
            Ok(true)
        }
    }
}

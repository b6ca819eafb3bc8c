//! AF_XDP sockets, written directly over `libc`.
//!
//! ```text
//!                     wire / veth peer
//!                           │  (any receive queue)
//!   XDP hook: stamp (TAI ns, 8 bytes of metadata),
//!             bpf_redirect_map(xskmap, ctx->rx_queue_index)
//!         │ queue 0        │ queue 1 ... n-1                   ▲
//!   ┌─────▼────────────────▼─────────┐           ┌─────────────┴───────────────┐
//!   │ XdpRx (one thread)             │           │ XdpTx (another thread)      │
//!   │ every queue's rx ring, earliest│           │ tx_push: copy into free     │
//!   │ stamp first ──► callback, frame│           │ frames, descriptors on the  │
//!   │ back onto that queue's fill    │           │ transmit socket's tx ring;  │
//!   │ ring at once                   │           │ tx_flush: sendto kick,      │
//!   │                                │           │ queue 0's completion ring   │
//!   │                                │           │ ──► free                    │
//!   └────────────────────────────────┘           └─────────────────────────────┘
//! ```
//!
//! [`AfXdp::open`] binds one socket to every receive queue of an interface
//! (counted with `ETHTOOL_GCHANNELS`, see [`crate::ifaces::rx_queue_count`]):
//! a multi-queue NIC or veth spreads flows over its queues, and a frame on a
//! queue without a socket would bypass the emulator (the program passes it
//! to the kernel stack). Each socket has its own UMEM, so the queues share
//! nothing the kernel writes. One receive half polls them all and hands
//! frames on in stamp order ([`XdpRx`]); a transmit-only socket bound to
//! queue 0 with that queue's UMEM (`XDP_SHARED_UMEM`) sends ([`XdpTx`]), so a
//! receiving thread's poll never runs the transmit path (module `socket`).
//! The receive and transmit halves share nothing mutable, so they run on two
//! threads without locks, user space's or the kernel's. The BPF link,
//! program, map and sockets are closed when both halves are gone; closing
//! the link detaches the program (module `attach`).
//!
//! Scaling: one thread receives from all queues, because the emulated link
//! is one link (one queue, one rate, one release order), and a link model
//! is sequential. On a machine with more cores the kernel's receive work
//! for the queues still spreads over the cores their interrupts land on;
//! the single receiving thread copies ~0.3-0.5 Mpps per core here
//! (docs/platform.md), which bounds one direction of one link. More links (more
//! interface pairs) scale with cores, one thread pair per direction.
//!
//! Checksums: AF_XDP gives no offload metadata with a frame (no
//! `virtio_net_hdr`, no `CHECKSUM_PARTIAL` flag; XDP hints for checksums do
//! not exist for veth or in copy mode). A frame a host sent with its
//! TCP/UDP checksum left for offload carries only the pseudo-header sum in
//! the checksum field. The receive callback gets each frame mutably, in
//! place in the UMEM, so the caller can finish such checksums without a
//! copy; the bridge does it with `linkem_core::wire::complete_partial_checksum`,
//! which finishes a checksum only when it does not verify and its field holds
//! exactly the pseudo-header sum, so a frame a host sent with a wrong checksum
//! is not "repaired". The other ways were worse: a second program type (TC)
//! to read `skb->ip_summed` costs an extra hook per frame, and asking hosts
//! to turn offloads off is what linkem must not need.
//!
//! Super-frames: with a program attached to a veth end, the kernel turns
//! off software segmentation offload (TSO, GSO, USO) on its peer
//! (`veth_fix_features`), so a host behind a veth sends wire-sized frames;
//! GRO on linkem's end never merges them, as XDP runs before GRO. What can
//! still arrive is a frame up to the MTU plus headers: jumbo frames (MTU
//! 9000) exceed a UMEM frame and come as multi-buffer frames. For an MTU
//! that does not fit one UMEM frame the program is loaded frags-aware
//! (`BPF_F_XDP_HAS_FRAGS`) and the sockets bound with `XDP_USE_SG` (Linux
//! 6.6+), up to 16 UMEM frames per frame.
//!
//! Why not a crate: `xdpilone` works but is EUPL-1.2 (copyleft); `xsk-rs`
//! needs clang, libelf and zlib at build time and pins an old `libbpf-sys`;
//! `aya` 0.15+ needs a newer rustc than this project's. The XDP program is
//! seventeen instructions ([`crate::bpf::xdp_redirect_program`]) and the
//! socket is a dozen syscalls, so this module and [`crate::bpf`] do it by
//! hand: no C toolchain on the building machine, no copyleft dependency.
//!
//! Modes, reported by [`XdpInfo`]: the program is attached in native (driver)
//! mode when the driver has it (veth does) and generic mode otherwise; the
//! sockets are bound zero-copy when the driver supports it and in copy mode
//! otherwise (veth: copy).
//!
//! Receive timestamps: the program writes `bpf_ktime_get_tai_ns()` into the
//! XDP metadata in front of each frame (or `bpf_ktime_get_ns()` on kernels
//! before 6.1); [`XdpRx::rx_batch`] converts it to CLOCK_REALTIME ns. TAI and
//! REALTIME differ by the kernel's TAI offset, a whole number of seconds, so
//! the TAI conversion is exact; MONOTONIC uses a measured offset, refreshed
//! every second.

mod attach;
pub mod port;
mod ring;
mod rx;
mod socket;
mod tx;
mod umem;

use std::fmt;
use std::io;
use std::mem::zeroed;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

pub use attach::PROGRAM_NAME;
pub use rx::{XdpRx, XdpRxStats};
use tx::LeadProbe;
pub use tx::{XdpTx, XdpTxStats};

use crate::afpacket::IoError;
use crate::bpf::{self, BpfError, RxClock, XdpMode};
use crate::caps::Cap;
use crate::ifaces;
use crate::kernel_path::{Gate, Kernel};
use attach::Attachment;
use rx::{RxQueue, TsClock};
use socket::{CreateError, Socket, SocketSpec, TxSocket};
use umem::{Frames, Mmap};

/// Room the kernel keeps in front of each received frame (`XDP_PACKET_HEADROOM`).
pub const XDP_PACKET_HEADROOM: u32 = 256;
/// Bytes of metadata the program writes in front of the frame: one u64 stamp.
const META_LEN: u64 = 8;
const ETH_HLEN: u32 = 14;
const VLAN_HLEN: u32 = 4;
/// Most `sendto` kicks per [`XdpTx::tx_flush`]. Copy mode transmits at most
/// 32 frames per kick, so 4 kicks move 128 frames; more would let one flush
/// hold the sending thread for long (docs/platform.md pitfall 4).
const MAX_KICKS_PER_FLUSH: usize = 4;
/// Smallest XSKMAP: keys are receive queues; a queue the interface gains
/// later (`ethtool -L`) has no socket and its frames go to the kernel stack.
const XSKMAP_MIN_ENTRIES: u32 = 64;
/// Most receive queues bound: more queues than this on one interface would
/// pin more UMEM than is reasonable for one link.
pub const MAX_QUEUES: u32 = 256;
/// Most UMEM frames one multi-buffer frame may span (the kernel's copy-mode
/// transmit limit is `MAX_SKB_FRAGS`, 17).
const MAX_PARTS: u32 = 16;

/// Configuration of [`AfXdp::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfXdpConfig {
    /// Bytes per UMEM frame: 2048 or 4096. A received frame fits one UMEM
    /// frame if it is at most `frame_size - 256` bytes (the kernel's
    /// headroom), so 2048 suits MTU 1500; larger frames span several.
    pub frame_size: u32,
    /// Frames in the first queue's UMEM, a power of two, at least 64: half
    /// receive, half transmit. Each other queue gets half as many, all
    /// receive.
    pub frame_count: u32,
    /// Where to run the XDP program; `None`: native if the driver has it,
    /// else generic.
    pub xdp_mode: Option<XdpMode>,
    /// Receive queues to bind (0 .. n); `None`: all the interface has.
    pub queues: Option<u32>,
    /// Open a kernel path ([`crate::kernel_path`]) and load the XDP program
    /// behind its gate; where it cannot open, the port has none (said once).
    pub kernel_path: bool,
}

impl Default for AfXdpConfig {
    fn default() -> Self {
        AfXdpConfig {
            frame_size: 2048,
            frame_count: 4096,
            xdp_mode: None,
            queues: None,
            kernel_path: false,
        }
    }
}

/// How the sockets are bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    /// The driver DMAs straight into the UMEM.
    ZeroCopy,
    /// The kernel copies frames between its buffers and the UMEM (veth, and
    /// any driver without AF_XDP zero-copy support).
    Copy,
}

impl fmt::Display for BindMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BindMode::ZeroCopy => "zero-copy",
            BindMode::Copy => "copy",
        })
    }
}

/// What [`AfXdp::open`] ended up with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpInfo {
    /// The interface's name.
    pub ifname: String,
    /// The interface's index, in the namespace [`AfXdp::open`] ran in.
    pub ifindex: u32,
    /// The interface's MTU in bytes (L3) when it was opened; it decides whether
    /// frames need several UMEM frames ([`XdpInfo::multi_buffer`]).
    pub mtu: u32,
    /// Receive queues bound, 0 .. queues.
    pub queues: u32,
    /// Where the XDP program runs.
    pub xdp_mode: XdpMode,
    /// How the sockets are bound.
    pub bind_mode: BindMode,
    /// Frames larger than a UMEM frame are carried in several.
    pub multi_buffer: bool,
    /// Which clock stamps received frames.
    pub rx_clock: RxClock,
    /// Bytes per UMEM frame, as configured ([`AfXdpConfig::frame_size`]).
    pub frame_size: u32,
    /// Frames in queue 0's UMEM, as configured ([`AfXdpConfig::frame_count`]):
    /// half for receiving, half for transmitting; every other queue has half
    /// as many, all for receiving.
    pub frame_count: u32,
}

impl fmt::Display for XdpInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let queues = if self.queues == 1 {
            "queue 0".to_string()
        } else {
            format!("queues 0-{}", self.queues - 1)
        };
        write!(
            f,
            "AF_XDP on '{}' {queues}: XDP {}, {} mode{}, {} x {} B frames, rx stamps from {}",
            self.ifname,
            self.xdp_mode,
            self.bind_mode,
            if self.multi_buffer {
                ", multi-buffer"
            } else {
                ""
            },
            self.frame_count,
            self.frame_size,
            match self.rx_clock {
                RxClock::Tai => "CLOCK_TAI",
                RxClock::Monotonic => "CLOCK_MONOTONIC",
            }
        )
    }
}

/// The kernel's counters for a socket (`XDP_STATISTICS`), or their sum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpKernelStats {
    /// Dropped for reasons other than a full ring or an empty fill ring
    /// (e.g. a frame larger than a UMEM frame on a socket without `XDP_USE_SG`).
    pub rx_dropped: u64,
    /// Descriptors on the receive side the kernel found invalid; should stay
    /// 0, as linkem only hands it addresses of its own receive frames.
    pub rx_invalid_descs: u64,
    /// Transmit descriptors the kernel refused as invalid (address or length
    /// outside the UMEM, a broken multi-buffer chain): those frames are not
    /// sent. Part of [`XdpTx::tx_errors`]; should stay 0.
    pub tx_invalid_descs: u64,
    /// Dropped because the rx ring was full: the receiving thread is too slow.
    pub rx_ring_full: u64,
    /// Dropped because the fill ring was empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel looked on the tx ring (at a `sendto` kick) and found
    /// it empty; harmless, nothing is lost.
    pub tx_ring_empty_descs: u64,
}

impl XdpKernelStats {
    fn add(&mut self, o: &XdpKernelStats) {
        self.rx_dropped += o.rx_dropped;
        self.rx_invalid_descs += o.rx_invalid_descs;
        self.tx_invalid_descs += o.tx_invalid_descs;
        self.rx_ring_full += o.rx_ring_full;
        self.rx_fill_ring_empty_descs += o.rx_fill_ring_empty_descs;
        self.tx_ring_empty_descs += o.tx_ring_empty_descs;
    }
}

/// A socket's memory, kept alive for both halves. Fields drop in order:
/// the ring mappings, the socket, then the UMEM it used.
struct SocketMem {
    _maps: Vec<Mmap>,
    fd: OwnedFd,
    _umem: Mmap,
}

/// What both halves keep alive. Fields drop in order: the attachment first
/// (sockets out of the map, program detached), then the transmit socket,
/// then the receiving sockets (the first owns the UMEM it shares).
struct Shared {
    _attachment: Attachment,
    _transmitter: (Mmap, OwnedFd),
    sockets: Vec<SocketMem>,
    info: XdpInfo,
}

// Safety: Shared is never mutated after construction; its raw pointers
// (inside Mmap) are only used to unmap on drop, which happens once, on the
// thread dropping the last Arc.
unsafe impl Send for Shared {}
// Safety: as above: shared references give access to fds and plain data only.
unsafe impl Sync for Shared {}

/// The AF_XDP backend. See the module docs.
pub struct AfXdp;

impl AfXdp {
    /// Opens every receive queue of `ifname` (or `cfg.queues` of them):
    /// program and map, one socket per queue (zero-copy if possible, else
    /// copy), the program attached (native if possible, else generic).
    /// Needs CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF, and CAP_IPC_LOCK or a
    /// memlock limit that covers the UMEMs.
    pub fn open(ifname: &str, cfg: AfXdpConfig) -> Result<(XdpRx, XdpTx), IoError> {
        check_config(ifname, &cfg)?;
        let iface = ifaces::lookup_up(ifname)?;
        let multi_buffer = needs_multi_buffer(ifname, iface.mtu, cfg.frame_size)?;
        let queues = cfg
            .queues
            .unwrap_or_else(|| ifaces::rx_queue_count(ifname))
            .clamp(1, MAX_QUEUES);
        // The program and map first: a permission or verifier problem is
        // reported before anything else, and before anything touches the
        // interface.
        let kernel = if cfg.kernel_path {
            Kernel::open_or_say(ifname, Gate::Xdp)
        } else {
            None
        };
        let gate = kernel.as_ref().map(|k| k.gate_fd().as_raw_fd());
        let mut attachment =
            Attachment::load(ifname, queues.max(XSKMAP_MIN_ENTRIES), multi_buffer, gate)?;
        let half = cfg.frame_count / 2;
        // Only a veth's completion stamp is the instant the frame reached the
        // device beyond (see crate::lead).
        let tx_metadata = ifaces::driver_name(ifname).as_deref() == Some("veth");
        let mut sockets = Vec::with_capacity(queues as usize);
        let mut bind_mode = BindMode::Copy;
        let mut transmitter = None;
        for queue in 0..queues {
            let spec = SocketSpec {
                ifindex: iface.index,
                queue,
                frame_size: cfg.frame_size,
                rx_frames: half,
                tx_frames: if queue == 0 { half } else { 0 },
                mode: BindMode::ZeroCopy,
                multi_buffer,
                tx_metadata,
            };
            let (sock, mode) = bind_with_retry(ifname, spec)?;
            if spec.tx_frames > 0 {
                transmitter = Some(sock.transmitter(ifname, &spec)?);
            }
            attachment.add_socket(ifname, queue, sock.fd.as_raw_fd())?;
            bind_mode = mode;
            sockets.push(sock);
        }
        let xdp_mode = attachment.attach(ifname, iface.index, &cfg)?;
        let info = XdpInfo {
            ifname: ifname.to_string(),
            ifindex: iface.index,
            mtu: iface.mtu,
            queues,
            xdp_mode,
            bind_mode,
            multi_buffer,
            rx_clock: attachment.rx_clock,
            frame_size: cfg.frame_size,
            frame_count: cfg.frame_count,
        };
        let transmitter = transmitter.expect("queue 0 transmits");
        let (mut rx, tx) = split(attachment, sockets, transmitter, info, &cfg);
        rx.kernel = kernel;
        Ok((rx, tx))
    }
}

/// Splits the sockets into the two halves and what they keep alive.
fn split(
    attachment: Attachment,
    sockets: Vec<Socket>,
    transmitter: TxSocket,
    info: XdpInfo,
    cfg: &AfXdpConfig,
) -> (XdpRx, XdpTx) {
    let fs = cfg.frame_size as u64;
    let half = (cfg.frame_count / 2) as u64;
    let mut queues = Vec::with_capacity(sockets.len());
    let mut mems = Vec::with_capacity(sockets.len());
    let mut completions = None;
    // Queue 0's: the UMEM that holds the transmit frames.
    let tx_metadata_len = sockets.first().map_or(0, |s| s.tx_metadata_len);
    for s in sockets {
        let frames = Frames::of(&s.umem, cfg.frame_size);
        queues.push(RxQueue {
            fd: s.fd.as_raw_fd(),
            fill: s.fill,
            rx: s.rx,
            frames,
            rx_frames_end: half * fs,
            unfilled: Vec::new(),
        });
        // Queue 0's UMEM holds the transmit frames; they come back on its
        // completion ring.
        if completions.is_none() {
            completions = Some((s.comp, frames));
        }
        mems.push(SocketMem {
            _maps: s.maps,
            fd: s.fd,
            _umem: s.umem,
        });
    }
    let (comp, frames) = completions.expect("queue 0 is open");
    let TxSocket {
        fd: tx_fd,
        map: tx_map,
        tx,
    } = transmitter;
    let max_frame_bytes = {
        let wire = (info.mtu + ETH_HLEN + VLAN_HLEN) as usize;
        let part = cfg.frame_size - tx_metadata_len;
        if info.multi_buffer {
            wire.min((MAX_PARTS * part) as usize)
        } else {
            wire.min(part as usize)
        }
    };
    let rx_clock = info.rx_clock;
    let n = queues.len();
    let fd = tx_fd.as_raw_fd();
    let shared = Arc::new(Shared {
        _attachment: attachment,
        _transmitter: (tx_map, tx_fd),
        sockets: mems,
        info,
    });
    let rx_half = XdpRx {
        kernel: None,
        shared: shared.clone(),
        queues,
        clock: TsClock::new(rx_clock),
        scratch: Vec::new(),
        stats: XdpRxStats::default(),
        avail: vec![0; n],
        taken: vec![0; n],
    };
    let tx_half = XdpTx {
        shared,
        fd,
        tx,
        comp,
        frames,
        tx_frames: half * fs..2 * half * fs,
        free: (half..2 * half).rev().map(|i| i * fs).collect(),
        max_frame_bytes,
        stats: XdpTxStats::default(),
        meta_len: tx_metadata_len,
        lead: LeadProbe::default(),
    };
    (rx_half, tx_half)
}

/// Whether the interface's largest frame needs several UMEM frames; an
/// error if it needs more than [`MAX_PARTS`].
fn needs_multi_buffer(ifname: &str, mtu: u32, frame_size: u32) -> Result<bool, IoError> {
    let needed = frame_size_for_mtu(mtu);
    if needed <= frame_size {
        return Ok(false);
    }
    let payload_per_part = frame_size - XDP_PACKET_HEADROOM;
    if (needed - XDP_PACKET_HEADROOM).div_ceil(payload_per_part) > MAX_PARTS {
        return Err(IoError::MtuTooLarge {
            ifname: ifname.to_string(),
            mtu,
            frame_size,
            needed,
        });
    }
    Ok(true)
}

/// How long [`AfXdp::open`] retries a bind refused with EBUSY. The kernel
/// releases a closed socket's hold on its queue from a workqueue, a few
/// milliseconds after the close, so an immediate reopen (a restart after a
/// crash or SIGKILL) can find the queue still taken.
const BIND_BUSY_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// Binds zero-copy, else copy; retries while the queue is busy.
fn bind_with_retry(ifname: &str, spec: SocketSpec) -> Result<(Socket, BindMode), IoError> {
    let deadline = std::time::Instant::now() + BIND_BUSY_RETRY;
    loop {
        let copy = SocketSpec {
            mode: BindMode::Copy,
            ..spec
        };
        let attempt = match Socket::create(ifname, &spec) {
            Ok(s) => Ok((s, BindMode::ZeroCopy)),
            Err(zc) if zc.retry_in_copy_mode => {
                Socket::create(ifname, &copy).map(|s| (s, BindMode::Copy))
            }
            Err(zc) => Err(zc),
        };
        match attempt {
            Err(e) if e.busy && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(CreateError {
                error,
                no_multi_buffer: true,
                ..
            }) => {
                return Err(IoError::Sys {
                    call: "bind(AF_XDP, XDP_USE_SG)",
                    ifname: ifname.to_string(),
                    source: io::Error::new(
                        io::ErrorKind::Unsupported,
                        format!(
                            "frames of this MTU span several UMEM frames, which needs \
                             multi-buffer AF_XDP (Linux 6.6+): {error}"
                        ),
                    ),
                })
            }
            other => return other.map_err(|e| e.error),
        }
    }
}

/// What opening AF_XDP needs: raw sockets, loading and attaching the XDP program
/// (CAP_BPF, CAP_NET_ADMIN) and pinning the UMEM (CAP_IPC_LOCK, unless `ulimit -l` is
/// unlimited).
pub fn needed_caps() -> Vec<Cap> {
    let mut v = vec![Cap::NET_RAW, Cap::NET_ADMIN, Cap::BPF];
    if !memlock_unlimited() {
        v.push(Cap::IPC_LOCK);
    }
    v
}

fn memlock_unlimited() -> bool {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|x| x.starts_with("Max locked memory"))
                .map(|x| x.split_whitespace().nth(3) == Some("unlimited"))
        })
        .unwrap_or(false)
}

/// Smallest UMEM frame that holds a received frame of `mtu` bytes of payload
/// plus Ethernet header and one VLAN tag, after the kernel's headroom.
pub fn frame_size_for_mtu(mtu: u32) -> u32 {
    XDP_PACKET_HEADROOM + ETH_HLEN + VLAN_HLEN + mtu
}

fn check_config(ifname: &str, cfg: &AfXdpConfig) -> Result<(), IoError> {
    let bad = |why: String| IoError::Sys {
        call: "AfXdpConfig",
        ifname: ifname.to_string(),
        source: io::Error::new(io::ErrorKind::InvalidInput, why),
    };
    if cfg.frame_size != 2048 && cfg.frame_size != 4096 {
        return Err(bad(format!(
            "frame_size {} must be 2048 or 4096",
            cfg.frame_size
        )));
    }
    if !cfg.frame_count.is_power_of_two() || !(64..=1 << 20).contains(&cfg.frame_count) {
        return Err(bad(format!(
            "frame_count {} must be a power of two from 64 to 1048576",
            cfg.frame_count
        )));
    }
    if cfg.queues == Some(0) {
        return Err(bad("queues must be at least 1".into()));
    }
    Ok(())
}

fn bpf_error(e: BpfError, ifname: &str) -> IoError {
    if e.errno() == libc::EPERM {
        return IoError::PermissionDenied {
            call: e.call,
            ifname: ifname.to_string(),
        };
    }
    let mut text = e.errno_text();
    if let Some(h) = &e.hint {
        text = format!("{text} ({h})");
    }
    if let Some(log) = &e.verifier_log {
        text = format!("{text}\nverifier log:\n{log}");
    }
    IoError::Sys {
        call: e.call,
        ifname: ifname.to_string(),
        source: io::Error::new(e.source.kind(), text),
    }
}

/// An OS error with a hint, as an `IoError::Sys`.
fn sys_error(call: &'static str, ifname: &str, e: io::Error, hint: Option<String>) -> IoError {
    if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) {
        return IoError::PermissionDenied {
            call,
            ifname: ifname.to_string(),
        };
    }
    let text = match hint {
        Some(h) => format!("{} ({h})", bpf::errno_text(&e)),
        None => bpf::errno_text(&e),
    };
    IoError::Sys {
        call,
        ifname: ifname.to_string(),
        source: io::Error::new(e.kind(), text),
    }
}

fn kernel_stats(fd: RawFd) -> io::Result<XdpKernelStats> {
    // Safety: xdp_statistics is plain data; the kernel overwrites it.
    let mut s: libc::xdp_statistics = unsafe { zeroed() };
    // Safety: xdp_statistics is plain integers: any bytes are a valid one.
    unsafe { crate::sys::getsockopt(fd, libc::SOL_XDP, libc::XDP_STATISTICS, &mut s) }?;
    Ok(XdpKernelStats {
        rx_dropped: s.rx_dropped,
        rx_invalid_descs: s.rx_invalid_descs,
        tx_invalid_descs: s.tx_invalid_descs,
        rx_ring_full: s.rx_ring_full,
        rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
        tx_ring_empty_descs: s.tx_ring_empty_descs,
    })
}

const _: () = assert!(std::mem::size_of::<libc::xdp_desc>() == 16);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_1500_fits_one_2048_byte_frame_and_9000_spans_several() {
        assert!(frame_size_for_mtu(1500) <= 2048);
        assert!(!needs_multi_buffer("x", 1500, 2048).unwrap());
        assert!(needs_multi_buffer("x", 9000, 2048).unwrap());
        assert!(needs_multi_buffer("x", 9000, 4096).unwrap());
        let e = needs_multi_buffer("x", 65536, 4096).unwrap_err();
        assert!(matches!(e, IoError::MtuTooLarge { mtu: 65536, .. }), "{e}");
    }

    #[test]
    fn bad_configurations_are_refused_with_the_constraint() {
        let e = check_config(
            "x",
            &AfXdpConfig {
                frame_size: 3000,
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("2048 or 4096"), "{e}");
        let e = check_config(
            "x",
            &AfXdpConfig {
                frame_count: 1000,
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("power of two"), "{e}");
        let e = check_config(
            "x",
            &AfXdpConfig {
                queues: Some(0),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("at least 1"), "{e}");
        check_config("x", &AfXdpConfig::default()).unwrap();
    }

    #[test]
    fn opening_loopback_fails_plainly() {
        // lo: MTU 65536 does not fit even multi-buffer frames; said before
        // anything needs a privilege.
        let e = AfXdp::open("lo", AfXdpConfig::default()).unwrap_err();
        assert!(matches!(e, IoError::MtuTooLarge { mtu: 65536, .. }), "{e}");
    }

    #[test]
    fn a_missing_interface_is_named() {
        let e = AfXdp::open("linkem-nope0", AfXdpConfig::default()).unwrap_err();
        assert_eq!(e.to_string(), "interface 'linkem-nope0' does not exist");
    }
}

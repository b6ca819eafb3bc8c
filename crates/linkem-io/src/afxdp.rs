//! AF_XDP sockets, written directly over `libc`.
//!
//! ```text
//!            wire / veth peer
//!                  │
//!   XDP hook: stamp (TAI ns, 8 bytes of metadata), bpf_redirect_map(xskmap, rx queue)
//!                  │                                         ▲
//!   ┌──────────────▼─────────────┐           ┌───────────────┴─────────────┐
//!   │ XdpRx (thread 1)           │           │ XdpTx (thread 2)            │
//!   │ rx ring ──► callback copies│           │ tx_push: copy into a free   │
//!   │ frame out, frame goes back │           │ frame, descriptor on tx ring│
//!   │ onto the fill ring at once │           │ tx_flush: sendto kick,      │
//!   │ frames 0 .. N/2 of the UMEM│           │ completion ring ──► free    │
//!   └────────────────────────────┘           │ frames N/2 .. N of the UMEM │
//!                                            └─────────────────────────────┘
//! ```
//!
//! [`AfXdp::open`] creates one socket bound to queue 0 of an interface, with a
//! UMEM of `frame_count` frames of `frame_size` bytes, and splits it into a
//! receive half and a transmit half that share nothing mutable: each owns two
//! of the four rings and half of the frames, so they run on two threads
//! without locks. The BPF link, program, map and socket are closed when both
//! halves are gone; closing the link detaches the program (docs/platform.md
//! pitfall 2: never attach through netlink, which outlives a killed process).
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
//! socket is bound zero-copy when the driver supports it and in copy mode
//! otherwise (veth: copy).
//!
//! Receive timestamps: the program writes `bpf_ktime_get_tai_ns()` into the
//! XDP metadata in front of each frame (or `bpf_ktime_get_ns()` on kernels
//! before 6.1); [`XdpRx::rx_batch`] converts it to CLOCK_REALTIME ns. TAI and
//! REALTIME differ by the kernel's TAI offset, a whole number of seconds, so
//! the TAI conversion is exact; MONOTONIC uses a measured offset, refreshed
//! every second.
//!
//! Transmit pitfalls handled here (docs/platform.md): copy mode sends at
//! most 32 frames per `sendto`, so [`XdpTx::tx_flush`] kicks a few times;
//! each transmit descriptor is written afresh with its length, so a frame
//! recycled from the completion ring never goes out with a stale (or zeroed)
//! length; transmit into a veth fails with EOPNOTSUPP unless the peer has
//! XDP or GRO on, and the error says so.

use std::ffi::CString;
use std::fmt;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::Arc;

use crate::afpacket::IoError;
use crate::bpf::{self, BpfError, RxClock, XdpMode};

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
/// Entries of the XSKMAP: one per receive queue the program may see. Only
/// queue 0 gets a socket; frames of other queues go to the kernel stack.
const XSKMAP_ENTRIES: u32 = 64;

/// Configuration of [`AfXdp::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfXdpConfig {
    /// Bytes per UMEM frame: 2048 or 4096. A received frame must fit in
    /// `frame_size - 256` bytes (the kernel's headroom), so 2048 suits MTU 1500.
    pub frame_size: u32,
    /// Frames in the UMEM, a power of two, at least 64. Half receive, half
    /// transmit.
    pub frame_count: u32,
    /// Where to run the XDP program; `None`: native if the driver has it,
    /// else generic.
    pub xdp_mode: Option<XdpMode>,
}

impl Default for AfXdpConfig {
    fn default() -> Self {
        AfXdpConfig {
            frame_size: 2048,
            frame_count: 4096,
            xdp_mode: None,
        }
    }
}

/// How the socket is bound.
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
    pub ifname: String,
    pub ifindex: u32,
    pub mtu: u32,
    /// Where the XDP program runs.
    pub xdp_mode: XdpMode,
    /// How the socket is bound.
    pub bind_mode: BindMode,
    /// Which clock stamps received frames.
    pub rx_clock: RxClock,
    pub frame_size: u32,
    pub frame_count: u32,
}

impl fmt::Display for XdpInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "AF_XDP on '{}' queue 0: XDP {}, {} mode, {} x {} B frames, rx stamps from {}",
            self.ifname,
            self.xdp_mode,
            self.bind_mode,
            self.frame_count,
            self.frame_size,
            match self.rx_clock {
                RxClock::Tai => "CLOCK_TAI",
                RxClock::Monotonic => "CLOCK_MONOTONIC",
            }
        )
    }
}

/// Counters of the receive half.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpRxStats {
    pub packets: u64,
    pub bytes: u64,
    /// Frames that carried no stamp (ts_ns 0).
    pub unstamped: u64,
    /// Descriptors pointing outside the receive frames (never expected).
    pub invalid_descs: u64,
}

/// Counters of the transmit half.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpTxStats {
    /// Frames put on the transmit ring.
    pub packets: u64,
    pub bytes: u64,
    /// Frames discarded by [`XdpTx::tx_push`] as larger than a UMEM frame.
    pub oversize: u64,
    /// Frames whose completion came back.
    pub completed: u64,
    /// `sendto` kicks made.
    pub kicks: u64,
    /// Kicks answered by EAGAIN, EBUSY or ENOBUFS (retried at the next flush).
    pub kicks_deferred: u64,
    /// Completion entries pointing outside the transmit frames (never expected).
    pub invalid_completions: u64,
}

/// The kernel's counters for the socket (`XDP_STATISTICS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpKernelStats {
    /// Dropped for reasons other than a full ring or an empty fill ring.
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    /// Dropped because the rx ring was full: the receiving thread is too slow.
    pub rx_ring_full: u64,
    /// Dropped because the fill ring was empty.
    pub rx_fill_ring_empty_descs: u64,
    pub tx_ring_empty_descs: u64,
}

/// The AF_XDP backend. See the module docs.
pub struct AfXdp;

impl AfXdp {
    /// Opens queue 0 of `ifname`: UMEM, rings, socket (zero-copy if possible,
    /// else copy), the XDP program (native if possible, else generic) and its
    /// XSKMAP entry. Needs root (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF).
    pub fn open(ifname: &str, cfg: AfXdpConfig) -> Result<(XdpRx, XdpTx), IoError> {
        check_config(ifname, &cfg)?;
        let (ifindex, mtu) = interface(ifname)?;
        // The program and map first: a permission or verifier problem is
        // reported before anything else, and before anything touches the
        // interface.
        let map =
            bpf::create_xskmap("linkem_xsks", XSKMAP_ENTRIES).map_err(|e| bpf_error(e, ifname))?;
        let (prog, rx_clock) = load_program(map.as_raw_fd()).map_err(|e| bpf_error(e, ifname))?;
        let needed = frame_size_for_mtu(mtu);
        if needed > cfg.frame_size {
            return Err(IoError::MtuTooLarge {
                ifname: ifname.to_string(),
                mtu,
                frame_size: cfg.frame_size,
                needed,
            });
        }

        let (sock, bind_mode) = bind_with_retry(ifname, ifindex, &cfg)?;
        bpf::map_update_u32(map.as_fd(), 0, sock.fd.as_raw_fd() as u32)
            .map_err(|e| bpf_error(e, ifname))?;
        let (link, xdp_mode) = match cfg.xdp_mode {
            None => bpf::attach_xdp(prog.as_fd(), ifindex, ifname),
            Some(mode) => bpf::link_xdp(prog.as_fd(), ifindex, ifname, mode).map(|l| (l, mode)),
        }
        .map_err(|e| bpf_error(e, ifname))?;

        let info = XdpInfo {
            ifname: ifname.to_string(),
            ifindex,
            mtu,
            xdp_mode,
            bind_mode,
            rx_clock,
            frame_size: cfg.frame_size,
            frame_count: cfg.frame_count,
        };
        let Socket {
            fd,
            umem,
            fill_map,
            comp_map,
            rx_map,
            tx_map,
            fill,
            comp,
            rx,
            tx,
        } = sock;
        let umem_base = umem.ptr;
        let umem_len = umem.len;
        let shared = Arc::new(Shared {
            _link: link,
            _prog: prog,
            map,
            _rings: [fill_map, comp_map, rx_map, tx_map],
            fd,
            _umem: umem,
            info,
        });
        let half = cfg.frame_count / 2;
        let rx_half = XdpRx {
            shared: shared.clone(),
            fill,
            rx,
            umem: umem_base,
            umem_len,
            frame_mask: cfg.frame_size as u64 - 1,
            rx_frames_end: half as u64 * cfg.frame_size as u64,
            clock: TsClock::new(rx_clock),
            unfilled: Vec::new(),
            stats: XdpRxStats::default(),
        };
        let tx_half = XdpTx {
            shared,
            tx,
            comp,
            umem: umem_base,
            frame_size: cfg.frame_size,
            tx_frames: half as u64 * cfg.frame_size as u64..umem_len as u64,
            free: (half..cfg.frame_count)
                .rev()
                .map(|i| i as u64 * cfg.frame_size as u64)
                .collect(),
            stats: XdpTxStats::default(),
        };
        Ok((rx_half, tx_half))
    }
}

/// How long [`AfXdp::open`] retries a bind refused with EBUSY. The kernel
/// releases a closed socket's hold on its queue from a workqueue, a few
/// milliseconds after the close, so an immediate reopen can find the queue
/// still taken.
const BIND_BUSY_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// Binds zero-copy, else copy; retries while the queue is busy.
fn bind_with_retry(
    ifname: &str,
    ifindex: u32,
    cfg: &AfXdpConfig,
) -> Result<(Socket, BindMode), IoError> {
    let deadline = std::time::Instant::now() + BIND_BUSY_RETRY;
    loop {
        let attempt = match Socket::create(ifname, ifindex, cfg, BindMode::ZeroCopy) {
            Ok(s) => Ok((s, BindMode::ZeroCopy)),
            Err(zc) if zc.retry_in_copy_mode => {
                Socket::create(ifname, ifindex, cfg, BindMode::Copy).map(|s| (s, BindMode::Copy))
            }
            Err(zc) => Err(zc),
        };
        match attempt {
            Err(e) if e.busy && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other.map_err(|e| e.error),
        }
    }
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
    Ok(())
}

/// The program with TAI stamps, or with MONOTONIC stamps on kernels before
/// 6.1 (which do not know helper 208).
fn load_program(map_fd: RawFd) -> Result<(OwnedFd, RxClock), BpfError> {
    let tai = bpf::xdp_redirect_program(map_fd, RxClock::Tai);
    match bpf::load_xdp_program("linkem_xsk", &tai) {
        Ok(fd) => Ok((fd, RxClock::Tai)),
        Err(e) if e.errno() == libc::EPERM => Err(e),
        Err(tai_err) => {
            let mono = bpf::xdp_redirect_program(map_fd, RxClock::Monotonic);
            match bpf::load_xdp_program("linkem_xsk", &mono) {
                Ok(fd) => Ok((fd, RxClock::Monotonic)),
                Err(mut e) => {
                    e.hint = Some(format!(
                        "the CLOCK_TAI variant failed first: {}",
                        tai_err.errno_text()
                    ));
                    Err(e)
                }
            }
        }
    }
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

/// Index, MTU and up-ness of an interface, through ioctls on a throwaway
/// socket (they answer for the caller's network namespace, unlike /sys).
fn interface(ifname: &str) -> Result<(u32, u32), IoError> {
    let no_such = || IoError::NoSuchInterface {
        ifname: ifname.to_string(),
    };
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
        return Err(no_such());
    }
    let cname = CString::new(ifname).map_err(|_| no_such())?;
    // Safety: cname is a valid NUL-terminated string.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        return Err(no_such());
    }
    // Safety: plain socket(2) call; the result is checked below.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(sys_error(
            "socket(AF_INET)",
            ifname,
            io::Error::last_os_error(),
            None,
        ));
    }
    // Safety: raw is a fresh fd owned by nobody else.
    let probe = unsafe { OwnedFd::from_raw_fd(raw) };
    // Safety: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(ifname.bytes()) {
        *dst = src as libc::c_char;
    }
    // Safety: req is a valid ifreq with the name set; SIOCGIFFLAGS writes ifru_flags.
    if unsafe { libc::ioctl(probe.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(sys_error(
            "ioctl(SIOCGIFFLAGS)",
            ifname,
            io::Error::last_os_error(),
            None,
        ));
    }
    // Safety: SIOCGIFFLAGS filled the flags member of the union.
    let flags = unsafe { req.ifr_ifru.ifru_flags } as libc::c_int;
    if flags & libc::IFF_UP == 0 {
        return Err(IoError::InterfaceDown {
            ifname: ifname.to_string(),
        });
    }
    // Safety: as above; SIOCGIFMTU writes ifru_mtu.
    if unsafe { libc::ioctl(probe.as_raw_fd(), libc::SIOCGIFMTU, &mut req) } < 0 {
        return Err(sys_error(
            "ioctl(SIOCGIFMTU)",
            ifname,
            io::Error::last_os_error(),
            None,
        ));
    }
    // Safety: SIOCGIFMTU filled the mtu member of the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok((ifindex, mtu as u32))
}

/// An mmap'd region, unmapped on drop.
struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mmap {
    fn new(len: usize, fd: RawFd, offset: u64, flags: libc::c_int) -> io::Result<Mmap> {
        // Safety: a fresh mapping chosen by the kernel; nothing is overwritten.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap {
            ptr: NonNull::new(p as *mut u8).expect("mmap never returns NULL on success"),
            len,
        })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // Safety: ptr/len describe a mapping made by Mmap::new that nothing
        // uses any more (the rings and halves that pointed into it are gone).
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len) };
    }
}

/// What both halves keep alive. Fields drop in order: the link first (the
/// program stops redirecting), the socket before the UMEM.
struct Shared {
    _link: OwnedFd,
    _prog: OwnedFd,
    map: OwnedFd,
    _rings: [Mmap; 4],
    fd: OwnedFd,
    _umem: Mmap,
    info: XdpInfo,
}

// Safety: Shared is never mutated after construction; its raw pointers
// (inside Mmap) are only used to unmap on drop, which happens once, on the
// thread dropping the last Arc.
unsafe impl Send for Shared {}
// Safety: as above: shared references give access to fds and plain data only.
unsafe impl Sync for Shared {}

impl Drop for Shared {
    fn drop(&mut self) {
        // The map holds a reference to the socket until the map itself is
        // freed, which the kernel defers; taking the socket out now lets the
        // close below release the queue at once. Failure changes nothing.
        let _ = bpf::map_delete_u32(self.map.as_fd(), 0);
    }
}

/// A socket with its UMEM and rings, before the split.
struct Socket {
    fd: OwnedFd,
    umem: Mmap,
    fill_map: Mmap,
    comp_map: Mmap,
    rx_map: Mmap,
    tx_map: Mmap,
    fill: ring::Producer<u64>,
    comp: ring::Consumer<u64>,
    rx: ring::Consumer<libc::xdp_desc>,
    tx: ring::Producer<libc::xdp_desc>,
}

struct CreateError {
    error: IoError,
    /// The zero-copy bind failed in a way copy mode may not.
    retry_in_copy_mode: bool,
    /// The bind failed with EBUSY: the queue has a socket (maybe one closing).
    busy: bool,
}

impl From<IoError> for CreateError {
    fn from(error: IoError) -> Self {
        CreateError {
            error,
            retry_in_copy_mode: false,
            busy: false,
        }
    }
}

fn setsockopt<T>(fd: &OwnedFd, opt: libc::c_int, val: &T) -> io::Result<()> {
    // Safety: val points to a live T of the length given.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            val as *const T as *const libc::c_void,
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Reads an XDP socket option; returns the length the kernel wrote.
fn getsockopt<T>(fd: RawFd, opt: libc::c_int, val: &mut T) -> io::Result<usize> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // Safety: val points to a writable T; len tells the kernel its size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            val as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(len as usize)
    }
}

impl Socket {
    fn create(
        ifname: &str,
        ifindex: u32,
        cfg: &AfXdpConfig,
        mode: BindMode,
    ) -> Result<Socket, CreateError> {
        let sys = |call: &'static str, e: io::Error| sys_error(call, ifname, e, None);
        // Safety: plain socket(2) call; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            let hint = (e.raw_os_error() == Some(libc::EAFNOSUPPORT))
                .then(|| "this kernel has no AF_XDP (CONFIG_XDP_SOCKETS)".to_string());
            return Err(sys_error("socket(AF_XDP)", ifname, e, hint).into());
        }
        // Safety: raw is a fresh fd owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let umem_len = cfg.frame_count as usize * cfg.frame_size as usize;
        let umem = Mmap::new(
            umem_len,
            -1,
            0,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
        )
        .map_err(|e| sys("mmap(UMEM)", e))?;
        // Safety: xdp_umem_reg is plain data; all-zero is valid (no flags, no headroom).
        let mut reg: libc::xdp_umem_reg = unsafe { zeroed() };
        reg.addr = umem.ptr.as_ptr() as u64;
        reg.len = umem_len as u64;
        reg.chunk_size = cfg.frame_size;
        setsockopt(&fd, libc::XDP_UMEM_REG, &reg).map_err(|e| {
            let hint = matches!(e.raw_os_error(), Some(libc::ENOBUFS) | Some(libc::ENOMEM))
                .then(|| "cannot pin the UMEM: run as root or raise `ulimit -l`".to_string());
            sys_error("setsockopt(XDP_UMEM_REG)", ifname, e, hint)
        })?;

        // Each half owns `half` frames. The rings user space consumes (rx,
        // completion) never hold more than that. The rings it produces into
        // (fill, tx) get twice as many entries: the kernel publishes its
        // consumer index lazily, when it has used up the entries it last
        // saw (up to `half` of them), so with `half` entries a frame just
        // received could find the fill ring apparently full. With `2 * half`
        // a frame we hold always finds a free entry.
        let half: u32 = cfg.frame_count / 2;
        let produced: u32 = cfg.frame_count;
        for (opt, size, name) in [
            (
                libc::XDP_UMEM_FILL_RING,
                produced,
                "setsockopt(XDP_UMEM_FILL_RING)",
            ),
            (
                libc::XDP_UMEM_COMPLETION_RING,
                half,
                "setsockopt(XDP_UMEM_COMPLETION_RING)",
            ),
            (libc::XDP_RX_RING, half, "setsockopt(XDP_RX_RING)"),
            (libc::XDP_TX_RING, produced, "setsockopt(XDP_TX_RING)"),
        ] {
            setsockopt(&fd, opt, &(size as libc::c_int)).map_err(|e| sys(name, e))?;
        }
        // Safety: xdp_mmap_offsets is plain data; the kernel overwrites it.
        let mut off: libc::xdp_mmap_offsets = unsafe { zeroed() };
        let got = getsockopt(fd.as_raw_fd(), libc::XDP_MMAP_OFFSETS, &mut off)
            .map_err(|e| sys("getsockopt(XDP_MMAP_OFFSETS)", e))?;
        if got != size_of::<libc::xdp_mmap_offsets>() {
            let e = io::Error::new(
                io::ErrorKind::Unsupported,
                "kernel before 5.4 (no ring flags)",
            );
            return Err(sys("getsockopt(XDP_MMAP_OFFSETS)", e).into());
        }

        let map_ring = |o: &libc::xdp_ring_offset,
                        entries: u32,
                        elem: usize,
                        pgoff: u64,
                        name: &'static str| {
            let len = o.desc as usize + entries as usize * elem;
            Mmap::new(
                len,
                fd.as_raw_fd(),
                pgoff,
                libc::MAP_SHARED | libc::MAP_POPULATE,
            )
            .map_err(|e| sys(name, e))
        };
        let desc = size_of::<libc::xdp_desc>();
        let fill_map = map_ring(
            &off.fr,
            produced,
            8,
            libc::XDP_UMEM_PGOFF_FILL_RING,
            "mmap(fill ring)",
        )?;
        let comp_map = map_ring(
            &off.cr,
            half,
            8,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            "mmap(completion ring)",
        )?;
        let rx_map = map_ring(
            &off.rx,
            half,
            desc,
            libc::XDP_PGOFF_RX_RING as u64,
            "mmap(rx ring)",
        )?;
        let tx_map = map_ring(
            &off.tx,
            produced,
            desc,
            libc::XDP_PGOFF_TX_RING as u64,
            "mmap(tx ring)",
        )?;

        // Safety: each mapping is a ring of the given entries laid out as the
        // kernel's offsets say; the Mmaps outlive the ring views (both end up
        // in Shared, which the halves holding the views keep alive); each
        // ring gets exactly one user-space view.
        let (mut fill, comp, rx, tx) = unsafe {
            (
                ring::Producer::new(ring::RingMem::at(&fill_map, &off.fr, produced)),
                ring::Consumer::new(ring::RingMem::at(&comp_map, &off.cr, half)),
                ring::Consumer::new(ring::RingMem::at(&rx_map, &off.rx, half)),
                ring::Producer::new(ring::RingMem::at(&tx_map, &off.tx, produced)),
            )
        };
        // Give the kernel every receive frame (the first half of the UMEM).
        for i in 0..half {
            let pushed = fill.push(i as u64 * cfg.frame_size as u64);
            debug_assert!(pushed, "the fill ring holds all receive frames");
        }
        fill.publish();

        let mut sa: libc::sockaddr_xdp = {
            // Safety: sockaddr_xdp is plain data; all-zero is valid.
            unsafe { zeroed() }
        };
        sa.sxdp_family = libc::AF_XDP as u16;
        sa.sxdp_ifindex = ifindex;
        sa.sxdp_queue_id = 0;
        sa.sxdp_flags = libc::XDP_USE_NEED_WAKEUP
            | match mode {
                BindMode::ZeroCopy => libc::XDP_ZEROCOPY,
                BindMode::Copy => libc::XDP_COPY,
            };
        // Safety: sa is a valid sockaddr_xdp of the length given.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const libc::sockaddr_xdp as *const libc::sockaddr,
                size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            let errno = e.raw_os_error().unwrap_or(0);
            let hint = (errno == libc::EBUSY)
                .then(|| format!("another AF_XDP socket is bound to queue 0 of '{ifname}'"));
            let call = match mode {
                BindMode::ZeroCopy => "bind(AF_XDP, XDP_ZEROCOPY)",
                BindMode::Copy => "bind(AF_XDP, XDP_COPY)",
            };
            return Err(CreateError {
                error: sys_error(call, ifname, e, hint),
                retry_in_copy_mode: mode == BindMode::ZeroCopy
                    && !matches!(errno, libc::EBUSY | libc::EPERM | libc::ENODEV),
                busy: errno == libc::EBUSY,
            });
        }
        Ok(Socket {
            fd,
            umem,
            fill_map,
            comp_map,
            rx_map,
            tx_map,
            fill,
            comp,
            rx,
            tx,
        })
    }
}

/// Turns raw stamps from the program into CLOCK_REALTIME ns.
#[derive(Debug)]
struct TsClock {
    kind: RxClock,
    /// realtime - raw clock, in ns.
    offset_ns: i64,
    /// Raw clock at the last calibration.
    calibrated_at: u64,
}

/// How often the offset is measured again: MONOTONIC drifts against
/// REALTIME by up to 500 ppm under NTP slewing (0.5 ms per second at worst);
/// the TAI offset changes only at a leap second.
const RECALIBRATE_NS: u64 = 1_000_000_000;

fn clock_ns(clock: libc::clockid_t) -> u64 {
    // Safety: timespec is plain data; clock_gettime only writes to it.
    let mut ts: libc::timespec = unsafe { zeroed() };
    // Safety: ts is a valid, writable timespec; the clock ids used exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl TsClock {
    fn new(kind: RxClock) -> TsClock {
        let mut c = TsClock {
            kind,
            offset_ns: 0,
            calibrated_at: 0,
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
    fn realtime_ns(&mut self, raw: u64) -> u64 {
        if raw == 0 {
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

/// The receive half: the fill and rx rings and the first half of the frames.
pub struct XdpRx {
    shared: Arc<Shared>,
    fill: ring::Producer<u64>,
    rx: ring::Consumer<libc::xdp_desc>,
    umem: NonNull<u8>,
    umem_len: usize,
    frame_mask: u64,
    /// Receive frames are the UMEM offsets below this.
    rx_frames_end: u64,
    clock: TsClock,
    /// Received frames the fill ring had no room for yet (never expected).
    unfilled: Vec<u64>,
    stats: XdpRxStats,
}

// Safety: XdpRx is the only user-space accessor of the fill and rx rings and
// of the receive frames; the transmit half touches only the other rings and
// frames; the mappings live in the Arc'd Shared as long as either half.
unsafe impl Send for XdpRx {}

impl XdpRx {
    /// Calls `f(frame, len, ts_ns)` on each of up to `max` received frames,
    /// `ts_ns` being the XDP hook's stamp in CLOCK_REALTIME ns (0 if the frame
    /// has none), and gives each frame back to the kernel right after. Never
    /// blocks. Returns the number of frames.
    pub fn rx_batch(
        &mut self,
        max: usize,
        mut f: impl FnMut(&[u8], u32, u64),
    ) -> io::Result<usize> {
        let n = self.rx.available(max.min(u32::MAX as usize) as u32);
        for i in 0..n {
            let d = self.rx.get(i);
            let (addr, len) = (d.addr, d.len as u64);
            let frame = addr & !self.frame_mask;
            if addr < META_LEN || addr + len > self.umem_len as u64 || frame >= self.rx_frames_end {
                self.stats.invalid_descs += 1;
                continue;
            }
            // Safety: addr - 8 .. addr + len lies within the UMEM (checked
            // above); the frame belongs to user space from its rx descriptor
            // until it is put back on the fill ring below, so the kernel does
            // not write it meanwhile.
            let (data, raw_ts) = unsafe {
                let p = self.umem.as_ptr().add(addr as usize);
                let meta = p.sub(META_LEN as usize) as *mut u64;
                let raw_ts = meta.read_unaligned();
                // Clear the stamp: a later frame in this slot without
                // metadata must not inherit it.
                meta.write_unaligned(0);
                (std::slice::from_raw_parts(p, len as usize), raw_ts)
            };
            let ts = self.clock.realtime_ns(raw_ts);
            if ts == 0 {
                self.stats.unstamped += 1;
            }
            self.stats.packets += 1;
            self.stats.bytes += len;
            f(data, len as u32, ts);
            // Room is certain (see the ring sizes in Socket::create); should
            // that ever fail, the frame waits for the next call.
            if !self.fill.push(frame) {
                self.unfilled.push(frame);
            }
        }
        self.rx.release(n);
        self.refill();
        self.fill.publish();
        Ok(n as usize)
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

    /// Waits until a frame may be ready or `timeout_ns` passed: ppoll(2) on
    /// the socket for POLLIN. Wakes the driver first if it asked for it
    /// (need_wakeup on the fill ring). An interrupted wait returns Ok.
    pub fn wait_rx(&mut self, timeout_ns: u64) -> io::Result<()> {
        if self.rx.available(1) > 0 {
            return Ok(());
        }
        if !self.unfilled.is_empty() {
            self.refill();
            self.fill.publish();
        }
        let fd = self.shared.fd.as_raw_fd();
        if self.fill.needs_wakeup() {
            // Safety: a zero-length recvfrom with null buffers only kicks the driver.
            unsafe {
                libc::recvfrom(
                    fd,
                    ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    ptr::null_mut(),
                    ptr::null_mut(),
                )
            };
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
        };
        // Safety: pfd and ts are valid for the call; no signal mask is given.
        let r = unsafe { libc::ppoll(&mut pfd, 1, &ts, ptr::null()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(())
    }

    pub fn info(&self) -> &XdpInfo {
        &self.shared.info
    }

    pub fn stats(&self) -> XdpRxStats {
        self.stats
    }

    /// The kernel's counters for the socket (shared by both halves).
    pub fn kernel_stats(&self) -> io::Result<XdpKernelStats> {
        kernel_stats(self.shared.fd.as_raw_fd())
    }

    /// The socket, for an event loop.
    pub fn fd(&self) -> RawFd {
        self.shared.fd.as_raw_fd()
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

impl fmt::Debug for XdpTx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdpTx")
            .field("info", &self.shared.info)
            .field("stats", &self.stats)
            .field("free_frames", &self.free.len())
            .finish_non_exhaustive()
    }
}

fn kernel_stats(fd: RawFd) -> io::Result<XdpKernelStats> {
    // Safety: xdp_statistics is plain data; the kernel overwrites it.
    let mut s: libc::xdp_statistics = unsafe { zeroed() };
    getsockopt(fd, libc::XDP_STATISTICS, &mut s)?;
    Ok(XdpKernelStats {
        rx_dropped: s.rx_dropped,
        rx_invalid_descs: s.rx_invalid_descs,
        tx_invalid_descs: s.tx_invalid_descs,
        rx_ring_full: s.rx_ring_full,
        rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
        tx_ring_empty_descs: s.tx_ring_empty_descs,
    })
}

/// The transmit half: the tx and completion rings and the second half of
/// the frames.
pub struct XdpTx {
    shared: Arc<Shared>,
    tx: ring::Producer<libc::xdp_desc>,
    comp: ring::Consumer<u64>,
    umem: NonNull<u8>,
    frame_size: u32,
    /// UMEM offsets of the transmit frames.
    tx_frames: std::ops::Range<u64>,
    /// Transmit frames owned by user space, ready to fill.
    free: Vec<u64>,
    stats: XdpTxStats,
}

// Safety: as for XdpRx: XdpTx alone touches the tx and completion rings and
// the transmit frames; the mappings outlive it through the Arc.
unsafe impl Send for XdpTx {}

impl XdpTx {
    /// Copies `frame` into a free UMEM frame and puts it on the transmit
    /// ring; it leaves at the next [`tx_flush`](Self::tx_flush). Returns
    /// false if no frame is free (flush, then retry). A frame larger than a
    /// UMEM frame is discarded, counted in `oversize`, and true returned.
    pub fn tx_push(&mut self, frame: &[u8]) -> bool {
        if frame.len() > self.frame_size as usize {
            self.stats.oversize += 1;
            return true;
        }
        if self.free.is_empty() {
            self.reclaim();
        }
        let Some(addr) = self.free.pop() else {
            return false;
        };
        // Safety: addr is a transmit frame of frame_size bytes inside the
        // UMEM, owned by user space (it is on the free list: never handed to
        // the kernel, or given back through the completion ring); the frame
        // fits (checked above).
        unsafe {
            ptr::copy_nonoverlapping(
                frame.as_ptr(),
                self.umem.as_ptr().add(addr as usize),
                frame.len(),
            );
        }
        // A fresh descriptor, length included, every time (docs/platform.md pitfall 5).
        let desc = libc::xdp_desc {
            addr,
            len: frame.len() as u32,
            options: 0,
        };
        // Room is certain (see the ring sizes in Socket::create); should that
        // ever fail, the frame stays free and the caller retries.
        if !self.tx.push(desc) {
            self.free.push(addr);
            return false;
        }
        self.stats.packets += 1;
        self.stats.bytes += frame.len() as u64;
        true
    }

    /// Publishes the pushed frames and kicks the kernel with
    /// `sendto(fd, NULL, 0, MSG_DONTWAIT)` while the ring has unsent frames
    /// (copy mode sends at most 32 per kick), at most 4 times; reclaims
    /// completed frames. EAGAIN, EBUSY and ENOBUFS are not errors: what was
    /// not sent goes at the next flush.
    pub fn tx_flush(&mut self) -> io::Result<()> {
        self.tx.publish();
        self.reclaim();
        for _ in 0..MAX_KICKS_PER_FLUSH {
            if self.tx.outstanding() == 0 || !self.tx.needs_wakeup() {
                break;
            }
            self.stats.kicks += 1;
            // Safety: a zero-length sendto with null buffers only kicks the transmit path.
            let r = unsafe {
                libc::sendto(
                    self.shared.fd.as_raw_fd(),
                    ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    ptr::null(),
                    0,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    // EAGAIN: the per-call batch was used up or the device queue is busy.
                    Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS) => {
                        self.stats.kicks_deferred += 1;
                        self.reclaim();
                        continue;
                    }
                    Some(libc::EOPNOTSUPP) => {
                        return Err(io::Error::new(
                            e.kind(),
                            format!(
                                "sendto on '{}': {} (the veth peer of '{}' needs XDP or GRO on: \
                                 `ethtool -K PEER gro on`)",
                                self.shared.info.ifname,
                                bpf::errno_text(&e),
                                self.shared.info.ifname
                            ),
                        ))
                    }
                    _ => {
                        return Err(io::Error::new(
                            e.kind(),
                            format!(
                                "sendto on '{}': {}",
                                self.shared.info.ifname,
                                bpf::errno_text(&e)
                            ),
                        ))
                    }
                }
            }
            self.reclaim();
        }
        Ok(())
    }

    /// Takes completed frames back from the kernel onto the free list.
    fn reclaim(&mut self) -> u32 {
        let n = self.comp.available(u32::MAX);
        for i in 0..n {
            let addr = self.comp.get(i) & !(self.frame_size as u64 - 1);
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

    /// Frames pushed and not yet completed by the kernel.
    pub fn in_flight(&self) -> usize {
        ((self.tx_frames.end - self.tx_frames.start) / self.frame_size as u64) as usize
            - self.free.len()
    }

    pub fn info(&self) -> &XdpInfo {
        &self.shared.info
    }

    pub fn stats(&self) -> XdpTxStats {
        self.stats
    }

    /// The kernel's counters for the socket (shared by both halves).
    pub fn kernel_stats(&self) -> io::Result<XdpKernelStats> {
        kernel_stats(self.shared.fd.as_raw_fd())
    }
}

/// Single-producer single-consumer rings as AF_XDP lays them out: a u32
/// producer index, a u32 consumer index, a u32 flags word and a power-of-two
/// array of entries, the indices free-running (wrapping at 2^32) and masked
/// on access. The user side keeps cached copies of both indices so that most
/// operations touch no shared cache line. Generic over raw pointers so the
/// tests below run them over plain memory, no socket.
pub(crate) mod ring {
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
            map: &super::Mmap,
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
            let free = self.cached_cons.wrapping_sub(self.cached_prod);
            if free > 0 {
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
}

const _: () = assert!(size_of::<libc::xdp_desc>() == 16);

#[cfg(test)]
mod tests {
    use super::ring::{Consumer, Producer, RingMem};
    use super::*;
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
        }
    }

    #[test]
    fn mtu_1500_fits_2048_byte_frames_and_9000_does_not() {
        assert!(frame_size_for_mtu(1500) <= 2048);
        assert!(frame_size_for_mtu(9000) > 4096);
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
        check_config("x", &AfXdpConfig::default()).unwrap();
    }

    #[test]
    fn opening_loopback_fails_plainly() {
        // lo: MTU 65536 does not fit a frame (as root); without privileges
        // the permission problem is reported first.
        let e = AfXdp::open("lo", AfXdpConfig::default()).unwrap_err();
        // Safety: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert!(matches!(e, IoError::MtuTooLarge { mtu: 65536, .. }), "{e}");
        } else {
            assert!(e.to_string().contains("needs root"), "{e}");
        }
    }

    #[test]
    fn a_missing_interface_is_named() {
        let e = AfXdp::open("linkem-nope0", AfXdpConfig::default()).unwrap_err();
        assert_eq!(e.to_string(), "interface 'linkem-nope0' does not exist");
    }
}

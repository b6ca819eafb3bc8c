//! One queue's AF_XDP sockets: the receiving socket (create it, register its
//! UMEM, size and map its fill, completion and rx rings, give the kernel the
//! receive frames, bind it to one queue), and on the queue that transmits a
//! second, transmit-only socket sharing that UMEM ([`Socket::transmitter`]).
//!
//! Why two sockets: in copy mode the kernel's poll of a socket that has a tx
//! ring runs that ring's transmit path under the socket's mutex
//! (`xsk_poll` -> `__xsk_generic_xmit`). One socket for both would make every
//! wait of the receiving thread contend with the sending thread's `sendto`
//! for that mutex, and send frames from the receiving thread; with the tx
//! ring on its own socket, polling the receiving socket never touches it.
//! The transmit socket is bound with `XDP_SHARED_UMEM` to the same interface
//! and queue, so it shares the receiving socket's buffer pool: the UMEM, the
//! fill ring and the completion ring (the kernel's own shared-UMEM mode; it
//! takes no flags of its own and inherits copy or zero-copy and `XDP_USE_SG`).
//!
//! Ring sizes: a queue owns `rx_frames` receive and `tx_frames` transmit
//! frames. The rings user space consumes (rx, completion) never hold more
//! than that. The rings it produces into (fill, tx) get twice as many
//! entries: the kernel publishes its consumer index lazily, when it has used
//! up the entries it last saw, so with exactly `rx_frames` entries a frame
//! just received could find the fill ring apparently full. With twice as
//! many a frame we hold always finds a free entry.
//!
//! A receive-only queue (every queue but the first) has no transmit socket;
//! the kernel still wants a completion ring with every UMEM, so it gets a
//! minimal one.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::ring::{self, Consumer, Producer};
use super::umem::Mmap;
use super::{sys_error, BindMode};
use crate::afpacket::IoError;
use crate::sys::setsockopt;

/// Completion ring entries of a socket that never transmits.
const MIN_RING: u32 = 64;

/// What one socket is made of.
#[derive(Debug, Clone, Copy)]
pub(super) struct SocketSpec {
    pub(super) ifindex: u32,
    pub(super) queue: u32,
    pub(super) frame_size: u32,
    pub(super) rx_frames: u32,
    /// Transmit frames of the UMEM (sent by [`Socket::transmitter`]); 0:
    /// receive only.
    pub(super) tx_frames: u32,
    pub(super) mode: BindMode,
    /// Bind with `XDP_USE_SG`: a frame may span several chunks.
    pub(super) multi_buffer: bool,
    /// Ask for [`TX_METADATA_LEN`] bytes of TX metadata in front of each
    /// transmit frame (for the send lead's stamp: [`crate::lead`]); a kernel
    /// without TX metadata (before 6.8, or 6.8-6.10 without the flag) gets
    /// none, and [`Socket::tx_metadata_len`] says 0.
    pub(super) tx_metadata: bool,
}

/// `struct xsk_tx_metadata`: its flags, then the request or, once the kernel
/// completed the frame, the completion (its TX stamp first).
pub(super) const TX_METADATA_LEN: u32 = size_of::<libc::xsk_tx_metadata>() as u32;

impl SocketSpec {
    fn fill_entries(&self) -> u32 {
        2 * self.rx_frames
    }

    fn comp_entries(&self) -> u32 {
        self.tx_frames.max(MIN_RING)
    }

    fn tx_entries(&self) -> u32 {
        2 * self.tx_frames
    }
}

/// A bound receiving socket with its UMEM and rings.
pub(super) struct Socket {
    pub(super) fd: OwnedFd,
    pub(super) umem: Mmap,
    pub(super) maps: Vec<Mmap>,
    pub(super) fill: Producer<u64>,
    pub(super) comp: Consumer<u64>,
    pub(super) rx: Consumer<libc::xdp_desc>,
    /// Bytes of TX metadata the UMEM was registered with (0 or [`TX_METADATA_LEN`]).
    pub(super) tx_metadata_len: u32,
}

/// A bound transmit-only socket sharing a [`Socket`]'s UMEM.
pub(super) struct TxSocket {
    pub(super) fd: OwnedFd,
    pub(super) map: Mmap,
    pub(super) tx: Producer<libc::xdp_desc>,
}

pub(super) struct CreateError {
    pub(super) error: IoError,
    /// The zero-copy bind failed in a way copy mode may not.
    pub(super) retry_in_copy_mode: bool,
    /// The bind failed with EBUSY: the queue has a socket (maybe one closing).
    pub(super) busy: bool,
    /// The bind refused `XDP_USE_SG` (a kernel before 6.6).
    pub(super) no_multi_buffer: bool,
}

impl From<IoError> for CreateError {
    fn from(error: IoError) -> Self {
        CreateError {
            error,
            retry_in_copy_mode: false,
            busy: false,
            no_multi_buffer: false,
        }
    }
}

impl Socket {
    /// Makes and binds one socket; see the module doc.
    pub(super) fn create(ifname: &str, spec: &SocketSpec) -> Result<Socket, CreateError> {
        let fd = new_socket(ifname)?;
        let (umem, tx_metadata_len) = register_umem(ifname, &fd, spec)?;
        let (off, maps) = map_rings(ifname, &fd, spec)?;
        let [fill_map, comp_map, rx_map] = &maps[..] else {
            unreachable!("map_rings maps three rings")
        };
        // Safety: each mapping is a ring of the given entries laid out as the
        // kernel's offsets say; the Mmaps outlive the ring views (both end up
        // in the socket's owner, which the halves holding the views keep
        // alive); each ring gets exactly one user-space view.
        let (mut fill, comp, rx) = unsafe {
            (
                Producer::new(ring::RingMem::at(fill_map, &off.fr, spec.fill_entries())),
                Consumer::new(ring::RingMem::at(comp_map, &off.cr, spec.comp_entries())),
                Consumer::new(ring::RingMem::at(rx_map, &off.rx, spec.rx_frames)),
            )
        };
        // Give the kernel every receive frame (the first frames of the UMEM).
        for i in 0..spec.rx_frames {
            let pushed = fill.push(i as u64 * spec.frame_size as u64);
            debug_assert!(pushed, "the fill ring holds all receive frames");
        }
        fill.publish();
        bind(ifname, &fd, spec)?;
        Ok(Socket {
            fd,
            umem,
            maps,
            fill,
            comp,
            rx,
            tx_metadata_len,
        })
    }

    /// Makes the transmit-only socket of this socket's queue: a tx ring of
    /// `2 * spec.tx_frames` entries, bound with `XDP_SHARED_UMEM` to this
    /// socket's interface and queue (see the module doc). Its frames come
    /// back on this socket's completion ring.
    pub(super) fn transmitter(&self, ifname: &str, spec: &SocketSpec) -> Result<TxSocket, IoError> {
        let sys = |call: &'static str, e: io::Error| sys_error(call, ifname, e, None);
        let fd = new_socket(ifname)?;
        setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            libc::XDP_TX_RING,
            &(spec.tx_entries() as libc::c_int),
        )
        .map_err(|e| sys("setsockopt(XDP_TX_RING)", e))?;
        let off = mmap_offsets(ifname, &fd)?;
        let len = off.tx.desc as usize + spec.tx_entries() as usize * size_of::<libc::xdp_desc>();
        let map = Mmap::new(
            len,
            fd.as_raw_fd(),
            libc::XDP_PGOFF_TX_RING as u64,
            libc::MAP_SHARED | libc::MAP_POPULATE,
        )
        .map_err(|e| sys("mmap(tx ring)", e))?;
        // Safety: the mapping is a ring of tx_entries descriptors laid out as
        // the kernel's offsets say; it lives in the TxSocket beside the view,
        // which the transmit half keeps alive; the ring has one view.
        let tx = unsafe { Producer::new(ring::RingMem::at(&map, &off.tx, spec.tx_entries())) };
        // Safety: sockaddr_xdp is plain data; all-zero is valid.
        let mut sa: libc::sockaddr_xdp = unsafe { zeroed() };
        sa.sxdp_family = libc::AF_XDP as u16;
        sa.sxdp_ifindex = spec.ifindex;
        sa.sxdp_queue_id = spec.queue;
        // The kernel refuses any other flag here: the mode is the pool's.
        sa.sxdp_flags = libc::XDP_SHARED_UMEM;
        sa.sxdp_shared_umem_fd = self.fd.as_raw_fd() as u32;
        // Safety: sa is a valid sockaddr_xdp of the length given.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const libc::sockaddr_xdp as *const libc::sockaddr,
                size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(sys(
                "bind(AF_XDP, XDP_SHARED_UMEM)",
                io::Error::last_os_error(),
            ));
        }
        Ok(TxSocket { fd, map, tx })
    }
}

fn new_socket(ifname: &str) -> Result<OwnedFd, IoError> {
    // Safety: plain socket(2) call; the result is checked.
    let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        let e = io::Error::last_os_error();
        let hint = (e.raw_os_error() == Some(libc::EAFNOSUPPORT))
            .then(|| "this kernel has no AF_XDP (CONFIG_XDP_SOCKETS)".to_string());
        return Err(sys_error("socket(AF_XDP)", ifname, e, hint));
    }
    // Safety: raw is a fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn register_umem(ifname: &str, fd: &OwnedFd, spec: &SocketSpec) -> Result<(Mmap, u32), IoError> {
    let frames = spec.rx_frames + spec.tx_frames;
    let umem = Mmap::umem(frames, spec.frame_size)
        .map_err(|e| sys_error("mmap(UMEM)", ifname, e, None))?;
    // Safety: xdp_umem_reg is plain data; all-zero is valid (no flags, no headroom).
    let mut reg: libc::xdp_umem_reg = unsafe { zeroed() };
    reg.addr = umem.ptr.as_ptr() as u64;
    reg.len = umem.len as u64;
    reg.chunk_size = spec.frame_size;
    let register = |reg: &libc::xdp_umem_reg| {
        setsockopt(fd.as_raw_fd(), libc::SOL_XDP, libc::XDP_UMEM_REG, reg)
    };
    if spec.tx_metadata && spec.tx_frames > 0 {
        let mut with = reg;
        with.flags = libc::XDP_UMEM_TX_METADATA_LEN;
        with.tx_metadata_len = TX_METADATA_LEN;
        // A kernel that knows neither the flag nor the field says EINVAL:
        // the UMEM is registered without, and no stamp is asked for.
        if register(&with).is_ok() {
            return Ok((umem, TX_METADATA_LEN));
        }
    }
    register(&reg).map_err(|e| {
        let hint =
            matches!(e.raw_os_error(), Some(libc::ENOBUFS) | Some(libc::ENOMEM)).then(|| {
                "cannot pin the UMEM: give linkem CAP_IPC_LOCK or raise `ulimit -l`".to_string()
            });
        sys_error("setsockopt(XDP_UMEM_REG)", ifname, e, hint)
    })?;
    Ok((umem, 0))
}

/// Sizes the rings and maps them: fill, completion, rx, in that order.
fn map_rings(
    ifname: &str,
    fd: &OwnedFd,
    spec: &SocketSpec,
) -> Result<(libc::xdp_mmap_offsets, Vec<Mmap>), IoError> {
    let sys = |call: &'static str, e: io::Error| sys_error(call, ifname, e, None);
    let off = size_rings(ifname, fd, spec)?;
    let desc = size_of::<libc::xdp_desc>();
    let rings = [
        (
            off.fr,
            spec.fill_entries(),
            8,
            libc::XDP_UMEM_PGOFF_FILL_RING,
            "mmap(fill ring)",
        ),
        (
            off.cr,
            spec.comp_entries(),
            8,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            "mmap(completion ring)",
        ),
        (
            off.rx,
            spec.rx_frames,
            desc,
            libc::XDP_PGOFF_RX_RING as u64,
            "mmap(rx ring)",
        ),
    ];
    let maps = rings
        .into_iter()
        .map(|(o, entries, elem, pgoff, name)| {
            let len = o.desc as usize + entries as usize * elem;
            Mmap::new(
                len,
                fd.as_raw_fd(),
                pgoff,
                libc::MAP_SHARED | libc::MAP_POPULATE,
            )
            .map_err(|e| sys(name, e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((off, maps))
}

/// Sets the ring sizes and reads where the kernel put each ring.
fn size_rings(
    ifname: &str,
    fd: &OwnedFd,
    spec: &SocketSpec,
) -> Result<libc::xdp_mmap_offsets, IoError> {
    let sys = |call: &'static str, e: io::Error| sys_error(call, ifname, e, None);
    let sizes = [
        (
            libc::XDP_UMEM_FILL_RING,
            spec.fill_entries(),
            "setsockopt(XDP_UMEM_FILL_RING)",
        ),
        (
            libc::XDP_UMEM_COMPLETION_RING,
            spec.comp_entries(),
            "setsockopt(XDP_UMEM_COMPLETION_RING)",
        ),
        (libc::XDP_RX_RING, spec.rx_frames, "setsockopt(XDP_RX_RING)"),
    ];
    for (opt, size, name) in sizes {
        setsockopt(fd.as_raw_fd(), libc::SOL_XDP, opt, &(size as libc::c_int))
            .map_err(|e| sys(name, e))?;
    }
    mmap_offsets(ifname, fd)
}

/// Where the kernel put each ring of `fd`.
fn mmap_offsets(ifname: &str, fd: &OwnedFd) -> Result<libc::xdp_mmap_offsets, IoError> {
    let sys = |call: &'static str, e: io::Error| sys_error(call, ifname, e, None);
    // Safety: xdp_mmap_offsets is plain data; the kernel overwrites it.
    let mut off: libc::xdp_mmap_offsets = unsafe { zeroed() };
    // Safety: as above, any bytes the kernel writes are a valid xdp_mmap_offsets.
    let got = unsafe {
        crate::sys::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            libc::XDP_MMAP_OFFSETS,
            &mut off,
        )
    }
    .map_err(|e| sys("getsockopt(XDP_MMAP_OFFSETS)", e))?;
    if got != size_of::<libc::xdp_mmap_offsets>() {
        let e = io::Error::new(
            io::ErrorKind::Unsupported,
            "kernel before 5.4 (no ring flags)",
        );
        return Err(sys("getsockopt(XDP_MMAP_OFFSETS)", e));
    }
    Ok(off)
}

fn bind(ifname: &str, fd: &OwnedFd, spec: &SocketSpec) -> Result<(), CreateError> {
    // Safety: sockaddr_xdp is plain data; all-zero is valid.
    let mut sa: libc::sockaddr_xdp = unsafe { zeroed() };
    sa.sxdp_family = libc::AF_XDP as u16;
    sa.sxdp_ifindex = spec.ifindex;
    sa.sxdp_queue_id = spec.queue;
    sa.sxdp_flags = libc::XDP_USE_NEED_WAKEUP
        | match spec.mode {
            BindMode::ZeroCopy => libc::XDP_ZEROCOPY,
            BindMode::Copy => libc::XDP_COPY,
        }
        | if spec.multi_buffer {
            libc::XDP_USE_SG
        } else {
            0
        };
    // Safety: sa is a valid sockaddr_xdp of the length given.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sa as *const libc::sockaddr_xdp as *const libc::sockaddr,
            size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    let errno = e.raw_os_error().unwrap_or(0);
    let hint = (errno == libc::EBUSY).then(|| {
        format!(
            "another AF_XDP socket is bound to queue {} of '{ifname}'",
            spec.queue
        )
    });
    let call = match spec.mode {
        BindMode::ZeroCopy => "bind(AF_XDP, XDP_ZEROCOPY)",
        BindMode::Copy => "bind(AF_XDP, XDP_COPY)",
    };
    Err(CreateError {
        error: sys_error(call, ifname, e, hint),
        retry_in_copy_mode: spec.mode == BindMode::ZeroCopy
            && !matches!(errno, libc::EBUSY | libc::EPERM | libc::ENODEV),
        busy: errno == libc::EBUSY,
        no_multi_buffer: spec.multi_buffer && errno == libc::EINVAL,
    })
}

//! Opening an interface for the bridge: a receive half for the direction that
//! starts there and a send half for the direction that ends there, each
//! owned by one pipeline thread.
//!
//! AF_XDP frames come without offload metadata, so each received frame whose
//! TCP/UDP checksum a host left for offload is finished here, in place in the
//! UMEM, with `complete_partial_checksum` (see `linkem_io::afxdp` for why).
//!
//! `--backend auto` takes AF_XDP where it opens and AF_PACKET otherwise, and
//! says what it found. What it checks and why: AF_XDP gives the tightest
//! timing (the XDP hook stamps each frame; no TPACKET block or softirq
//! queue in between), carries every receive queue, and on a veth end the
//! kernel then turns segmentation offload off on the host's end, so only
//! wire-sized frames arrive. Copy-mode AF_XDP transmit into a veth works
//! whatever the host's end has set (measured on Linux 6.18 with the host
//! end's GRO off, its default); the "needs GRO on the peer" advice linkem
//! used to print was about the peer of linkem's end, which is the host's
//! end, a namespace linkem cannot and must not change. AF_XDP is not taken
//! when it cannot open: no capability to load BPF (CAP_BPF), an MTU too large
//! even for multi-buffer frames, a kernel without AF_XDP, or another XDP
//! program on the interface.
//!
//! Coalescing on transmit (`--coalesce on`, the default) changes that choice:
//! `auto` then takes AF_PACKET. Bulk TCP is what a link emulator carries most,
//! and its receiving host's per-frame work is what limits it (PLATFORM.md,
//! issue 21: linkem's own code is a few percent); AF_PACKET hands the host a
//! super-frame through a socket with `PACKET_VNET_HDR`, AF_XDP cannot: an
//! AF_XDP frame reaches a veth as an XDP frame (`xdp_frame`, at most a page
//! per buffer, no GSO metadata: the TX metadata of Linux 6.8+ carries a
//! checksum request and a launch time, never a segmentation request), and a
//! veth with XDP on its peer has its GSO features turned off. So the rule:
//! AF_PACKET while coalescing is on; `--coalesce off` gives AF_XDP where it
//! opens, for the tightest timing of small-frame traffic.

use anyhow::{anyhow, bail, Result};
use linkem_core::wire::{complete_partial_checksum, Offload};
use linkem_io::afpacket::{self, AfPacket, AfPacketConfig, GsoSender};
use linkem_io::afxdp::{self, AfXdp, AfXdpConfig, Pushed, XdpRx, XdpTx};
use linkem_io::caps::{self, Cap, CapSet};
use linkem_io::ifaces;
use linkem_runtime::port::{PortHealth, RxFrame, RxPort, TxOutcome, TxPort, WaitFds};
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Which packet I/O the bridge uses.
#[derive(Clone, Copy, clap::ValueEnum, PartialEq, Eq, Debug)]
pub enum BackendKind {
    /// AF_XDP: an XDP program redirects every frame of every receive queue
    /// to a socket (copy or zero-copy, whichever the driver offers).
    Xdp,
    /// AF_PACKET with TPACKET_V2 mmap rings.
    Packet,
    /// AF_XDP where it opens, else AF_PACKET (the reason is printed).
    Auto,
}

/// The RX ring's socket, and whether its interface was last seen down.
struct PacketRx(AfPacket, bool);
/// The TX ring's socket, and the one that sends super-frames (if it opened).
struct PacketTx {
    ring: AfPacket,
    gso: Option<GsoSender>,
    /// When the interface's MTU was last read ([`MTU_CHECK_EVERY_NS`]).
    mtu_read_ns: u64,
}

/// How often the send half reads its interface's MTU again: frames longer
/// than a lowered MTU count as too-big at most this long after the change.
const MTU_CHECK_EVERY_NS: u64 = 250_000_000;

impl RxPort for PacketRx {
    fn rx_batch(&mut self, max: usize, f: &mut dyn FnMut(RxFrame<'_>)) -> io::Result<usize> {
        Ok(self.0.rx_batch(max, |fr| {
            f(RxFrame {
                data: fr.data,
                orig_len: fr.orig_len,
                ts_ns: fr.ts_ns,
                offload: fr.offload,
                owner: None,
            })
        }))
    }

    fn wait_rx(&mut self, timeout_ns: u64) -> io::Result<()> {
        self.0
            .poll_rx(Some(Duration::from_nanos(timeout_ns)))
            .map(|_| ())
            .map_err(io::Error::other)
    }

    fn rx_kernel_drops(&mut self) -> u64 {
        self.0.kernel_drops()
    }

    fn wait_fds(&mut self, fds: &mut Vec<RawFd>) -> io::Result<WaitFds> {
        if self.0.rx_ready() {
            return Ok(WaitFds::Ready);
        }
        fds.push(self.0.fd());
        Ok(WaitFds::Added)
    }

    fn health(&mut self) -> PortHealth {
        // The kernel sets ENETDOWN on the socket when the interface goes
        // down (deleting it takes it down first); reading it clears it, so
        // poll sleeps again.
        let _ = self.0.take_error();
        if self.0.interface_gone() {
            return PortHealth::Gone(format!(
                "interface '{}' is gone (deleted, moved to another namespace, or its veth peer \
                 or namespace deleted)",
                self.0.ifname()
            ));
        }
        let up = self.0.is_up();
        if up == self.1 {
            self.1 = !up;
            if up {
                eprintln!("linkem: {}: up again; frames flow", self.0.ifname());
            } else {
                eprintln!(
                    "linkem: {}: interface down; frames sent to it are dropped (tx-error) \
                     until it is up again",
                    self.0.ifname()
                );
            }
        }
        if up {
            PortHealth::Running
        } else {
            PortHealth::Down
        }
    }
}

impl TxPort for PacketTx {
    fn tx_push(&mut self, frame: &[u8]) -> TxOutcome {
        // One clock read per frame (vDSO, ~20 ns): the first frame after an
        // idle spell is checked against the MTU as it is now.
        let now = linkem_runtime::clock::now_ns();
        if now.wrapping_sub(self.mtu_read_ns) > MTU_CHECK_EVERY_NS {
            self.mtu_read_ns = now;
            self.ring.refresh_mtu();
        }
        match self.ring.tx_push(frame) {
            afpacket::TxPush::Queued => TxOutcome::Queued,
            afpacket::TxPush::NoRoom => TxOutcome::NoRoom,
            afpacket::TxPush::TooBig => TxOutcome::TooBig,
        }
    }

    fn tx_flush(&mut self) -> io::Result<()> {
        self.ring.tx_flush().map_err(io::Error::other)
    }

    fn tx_errors(&mut self) -> u64 {
        let stats = self.ring.stats();
        stats.tx_wrong_format + stats.tx_link_down
    }

    fn max_frame_bytes(&self) -> usize {
        self.ring.max_frame_bytes()
    }

    fn sends_super_frames(&self) -> bool {
        self.gso.is_some()
    }

    fn tx_send_super(&mut self, frame: &[u8], offload: Offload) -> io::Result<bool> {
        let Some(gso) = self.gso.as_mut() else {
            return Err(io::Error::from(io::ErrorKind::Unsupported));
        };
        // What the ring holds was due first: it reaches the device first.
        self.ring.tx_flush().map_err(io::Error::other)?;
        let hdr_len = linkem_core::wire::locate(frame)
            .map(|h| h.payload_offset as u16)
            .unwrap_or(0);
        gso.send(&offload.to_virtio_net_hdr(hdr_len), frame)
            .map_err(io::Error::other)
    }
}

struct XskRx {
    rx: XdpRx,
    /// Promiscuous mode while the receiving half lives.
    _promisc: ifaces::Promiscuous,
}

struct XskTx {
    tx: XdpTx,
    warned_too_big: bool,
    /// The last kick said the interface is down (ENETDOWN): frames are
    /// dropped (counted in `dropped_down`, reported as tx errors) until a
    /// kick goes through again; descriptors already on the ring leave then.
    down: bool,
    dropped_down: u64,
}

impl RxPort for XskRx {
    fn rx_batch(&mut self, max: usize, f: &mut dyn FnMut(RxFrame<'_>)) -> io::Result<usize> {
        self.rx.rx_batch(max, |data, len, ts_ns| {
            // Finishes a checksum left for offload; anything else untouched.
            complete_partial_checksum(data);
            f(RxFrame {
                data,
                orig_len: len,
                ts_ns,
                offload: Default::default(),
                owner: None,
            })
        })
    }

    fn wait_rx(&mut self, timeout_ns: u64) -> io::Result<()> {
        self.rx.wait_rx(timeout_ns)
    }

    fn rx_kernel_drops(&mut self) -> u64 {
        self.rx.kernel_drops()
    }

    fn wait_fds(&mut self, fds: &mut Vec<RawFd>) -> io::Result<WaitFds> {
        Ok(if self.rx.prepare_wait(fds) {
            WaitFds::Ready
        } else {
            WaitFds::Added
        })
    }
}

impl XskTx {
    /// Says once what frames too big for this interface mean and how to
    /// avoid them.
    fn warn_too_big(&mut self, len: usize) {
        if self.warned_too_big {
            return;
        }
        self.warned_too_big = true;
        let info = self.tx.info();
        eprintln!(
            "linkem: warning: a {len}-byte frame is larger than '{}' carries ({} bytes: MTU {} + \
             Ethernet header and tag); such frames are dropped and counted as too-big \
             (give both interfaces and hosts the same MTU)",
            info.ifname,
            self.tx.max_frame_bytes(),
            info.mtu
        );
    }
}

impl TxPort for XskTx {
    fn tx_push(&mut self, frame: &[u8]) -> TxOutcome {
        if self.down {
            // One kick per frame while down: it tells when the interface is up.
            let _ = self.tx_flush();
            if self.down {
                self.dropped_down += 1;
                return TxOutcome::Queued;
            }
        }
        match self.tx.tx_push(frame) {
            Pushed::Queued => TxOutcome::Queued,
            Pushed::NoRoom => TxOutcome::NoRoom,
            Pushed::TooBig => {
                self.warn_too_big(frame.len());
                TxOutcome::TooBig
            }
        }
    }

    fn tx_flush(&mut self) -> io::Result<()> {
        match self.tx.tx_flush() {
            // Set down: the frames wait on the ring, new ones are dropped
            // (tx_push) until it is up. Gone (ENXIO) stays an error: the
            // pair stops, naming the interface.
            Err(e) if e.kind() == io::ErrorKind::NetworkDown => {
                self.down = true;
                Ok(())
            }
            r => {
                if r.is_ok() {
                    self.down = false;
                }
                r
            }
        }
    }

    fn tx_errors(&mut self) -> u64 {
        self.tx.tx_errors() + self.dropped_down
    }

    fn max_frame_bytes(&self) -> usize {
        self.tx.max_frame_bytes()
    }
}

pub type Halves = (Box<dyn RxPort>, Box<dyn TxPort>, String);

/// How large an interface's rings are: the kernel allocates them whole at
/// open, and they stay resident (AF_PACKET: 2 KiB a slot at MTU 1500).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Rings {
    /// One link per process: a receive ring of 4096 slots (8 MiB), a
    /// transmit ring of 2048 (4 MiB); AF_XDP a UMEM of 4096 frames.
    Full,
    /// One of many links (`--pair`): 1024 and 512 slots (2 and 1 MiB),
    /// AF_XDP 1024 frames; bursts beyond them are the kernel's drops
    /// (`rx_kernel_drops`) or wait for room.
    Small,
}

fn open_packet(ifname: &str, mtu: u32, rings: Rings) -> Result<Halves> {
    let frame_size = afpacket::frame_size_for_mtu(mtu).max(2048);
    let (rx_frames, tx_frames) = match rings {
        Rings::Full => (4096, 2048),
        Rings::Small => (1024, 512),
    };
    // Two sockets: the receiving one belongs to the input stage of one
    // direction, the send-only one to the output stage of the other, so the
    // two threads share nothing. Each gets the smallest ring of the kind it
    // does not use (the kernel wants both).
    let rx = AfPacket::open(
        ifname,
        AfPacketConfig {
            frame_size,
            rx_frames,
            tx_frames: 16,
            ..AfPacketConfig::default()
        },
    )?;
    let tx = AfPacket::open(
        ifname,
        AfPacketConfig {
            frame_size,
            rx_frames: 16,
            tx_frames,
            receive: false,
            ..AfPacketConfig::default()
        },
    )?;
    // Cheap to hold; used only while coalescing is on. Without it the output
    // stage sends every wire frame through the ring.
    let gso = match GsoSender::open(ifname, true) {
        Ok(g) => Some(g),
        Err(e) => {
            eprintln!("linkem: {ifname}: super-frames cannot be sent ({e}); sending wire frames");
            None
        }
    };
    Ok((
        Box::new(PacketRx(rx, false)),
        Box::new(PacketTx {
            ring: tx,
            gso,
            mtu_read_ns: linkem_runtime::clock::now_ns(),
        }),
        "AF_PACKET TPACKET_V2 rings, promiscuous while open".to_string(),
    ))
}

fn open_xdp(ifname: &str, mtu: u32, rings: Rings) -> Result<Halves> {
    // 4096-byte UMEM frames above MTU 1500: fewer parts per jumbo frame.
    let frame_size = if afxdp::frame_size_for_mtu(mtu) <= 2048 {
        2048
    } else {
        4096
    };
    let (rx, tx) = AfXdp::open(
        ifname,
        AfXdpConfig {
            frame_size,
            frame_count: match rings {
                Rings::Full => AfXdpConfig::default().frame_count,
                Rings::Small => 1024,
            },
            ..AfXdpConfig::default()
        },
    )?;
    // A NIC filters by MAC address unless promiscuous; the membership goes
    // with its socket, so nothing is left set after linkem ends.
    let promisc = ifaces::lookup(ifname).and_then(|i| ifaces::Promiscuous::on(&i))?;
    let info = format!(
        "{}, XDP program {} (detached when linkem exits, even if killed), promiscuous while open",
        rx.info(),
        afxdp::PROGRAM_NAME
    );
    Ok((
        Box::new(XskRx {
            rx,
            _promisc: promisc,
        }),
        Box::new(XskTx {
            tx,
            warned_too_big: false,
            down: false,
            dropped_down: 0,
        }),
        info,
    ))
}

/// Opens `ifname` with the chosen backend. Returns the receive half, the send
/// half and a description of what was opened and set.
pub fn open_interface(kind: BackendKind, ifname: &str, mtu: u32) -> Result<Halves> {
    open_interface_with(kind, ifname, mtu, Rings::Full)
}

/// [`open_interface`] with rings of the given size.
pub fn open_interface_with(
    kind: BackendKind,
    ifname: &str,
    mtu: u32,
    rings: Rings,
) -> Result<Halves> {
    match kind {
        BackendKind::Packet => open_packet(ifname, mtu, rings),
        BackendKind::Xdp => open_xdp(ifname, mtu, rings),
        BackendKind::Auto => match open_xdp(ifname, mtu, rings) {
            Ok(h) => {
                let driver = ifaces::driver_name(ifname).unwrap_or_else(|| "unknown".into());
                eprintln!(
                    "linkem: {ifname}: --backend auto chose AF_XDP (driver {driver}: it opened; \
                     every receive queue bound; no change needed on the hosts)"
                );
                Ok(h)
            }
            Err(e) => {
                eprintln!(
                    "linkem: {ifname}: --backend auto chose AF_PACKET: AF_XDP did not open ({e:#})"
                );
                open_packet(ifname, mtu, rings)
            }
        },
    }
}

/// The two interfaces, checked and held for this process (see
/// [`claim_interfaces`]).
pub struct Claimed {
    pub a: ifaces::Iface,
    pub b: ifaces::Iface,
    _locks: [ifaces::InterfaceLock; 2],
}

/// Checks that IF_A and IF_B can be bridged and holds them: both exist and
/// are up, neither is a loopback interface (its traffic is the machine's
/// own, never a wire's), they are two different interfaces (also under two
/// names), and no other linkem holds either (both backends take the same
/// lock, see `linkem_io::ifaces::InterfaceLock`).
pub fn claim_interfaces(if_a: &str, if_b: &str) -> Result<Claimed> {
    let check = |name: &str| -> Result<ifaces::Iface> {
        let i = ifaces::lookup(name).map_err(|e| match e {
            afpacket::IoError::NoSuchInterface { .. } => {
                anyhow!("interface '{name}' does not exist (see 'ip link')")
            }
            e => anyhow!(e),
        })?;
        if i.is_loopback() {
            bail!(
                "interface '{name}' is a loopback interface: its traffic is this machine's own; \
                 bridge two interfaces that face the hosts"
            );
        }
        if !i.is_up() {
            bail!("interface '{name}' is down (ip link set dev {name} up)");
        }
        Ok(i)
    };
    let (a, b) = (check(if_a)?, check(if_b)?);
    if a.index == b.index {
        bail!(
            "IF_A '{if_a}' and IF_B '{if_b}' are the same interface (index {}): a bridge needs two",
            a.index
        );
    }
    let locks = [
        ifaces::InterfaceLock::take(&a)?,
        ifaces::InterfaceLock::take(&b)?,
    ];
    Ok(Claimed {
        a,
        b,
        _locks: locks,
    })
}

/// What a backend needs, as setcap names it. AF_PACKET: raw sockets. AF_XDP:
/// also loading and attaching the XDP program (CAP_BPF, CAP_NET_ADMIN) and
/// pinning the UMEM (CAP_IPC_LOCK, or a large enough `ulimit -l`).
fn needed_caps(kind: BackendKind) -> Vec<Cap> {
    match kind {
        BackendKind::Packet => vec![Cap::NET_RAW],
        BackendKind::Xdp | BackendKind::Auto => {
            let mut v = vec![Cap::NET_RAW, Cap::NET_ADMIN, Cap::BPF];
            if !memlock_unlimited() {
                v.push(Cap::IPC_LOCK);
            }
            v
        }
    }
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

/// Every capability the bridge may use, for the `setcap` line.
pub const SETCAP_CAPS: &str = "cap_net_raw,cap_net_admin,cap_bpf,cap_ipc_lock,cap_sys_nice";

fn setcap_hint() -> String {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "/path/to/linkem".into());
    // Capabilities on a file anyone may run let anyone bridge and capture any
    // interface: the hint says so, README "Privileges" gives the group recipe.
    format!(
        "run as root, or once: sudo setcap {SETCAP_CAPS}+ep {exe} \
         (first make it executable by one group only, as README \"Privileges\" shows: \
         every user who can run it can bridge and capture any interface)"
    )
}

/// `auto` while coalescing on transmit is on becomes AF_PACKET, and says
/// why (see the module doc); anything else is kept. `xdp` asked for while
/// coalescing is on is kept, with a word on what it costs: every wire frame
/// leaves on its own, and bulk TCP through a delay then outruns the output
/// stage (a fifth of AF_PACKET's goodput and 9.5 % of frames `late` or
/// `backpressure` through `delay 10ms`, docs/numbers.md).
pub fn resolve_auto(kind: BackendKind, coalesce: bool) -> BackendKind {
    if kind == BackendKind::Auto && coalesce {
        eprintln!(
            "linkem: --backend auto chose AF_PACKET: it hands the hosts super-frames \
             (--coalesce on, the default); --coalesce off lets auto take AF_XDP"
        );
        return BackendKind::Packet;
    }
    if kind == BackendKind::Xdp && coalesce {
        eprintln!(
            "linkem: --backend xdp sends every wire frame on its own (AF_XDP carries no \
             segmentation offload, so --coalesce has nothing to merge into): bulk TCP gets a \
             fraction of what --backend packet or auto gives"
        );
    }
    kind
}

/// Checks the capabilities the backend (and SCHED_FIFO, if `realtime`)
/// needs, instead of requiring uid 0. `auto` without what AF_XDP needs
/// becomes AF_PACKET, and says why. Returns the backend to use.
pub fn check_capabilities(kind: BackendKind, realtime: bool) -> Result<BackendKind> {
    let have = caps::current()
        .map_err(|e| anyhow!("cannot read this process's capabilities: {e}"))?
        .effective;
    let missing = |caps: &[Cap]| -> Vec<String> {
        caps.iter()
            .filter(|c| !have.has(**c))
            .map(|c| c.to_string())
            .collect()
    };
    let mut kind = kind;
    if kind == BackendKind::Auto {
        let lacking = missing(&needed_caps(BackendKind::Xdp));
        if !lacking.is_empty() {
            eprintln!(
                "linkem: --backend auto chose AF_PACKET: AF_XDP needs {} ({})",
                lacking.join(", "),
                setcap_hint()
            );
            kind = BackendKind::Packet;
        }
    }
    let mut need = needed_caps(kind);
    if realtime {
        need.push(Cap::SYS_NICE);
    }
    let lacking = missing(&need);
    if !lacking.is_empty() {
        bail!(
            "linkem bridge needs {} here{} ({})",
            lacking.join(", "),
            if lacking.iter().any(|c| c == "CAP_SYS_NICE") {
                " (CAP_SYS_NICE for --realtime; --realtime off runs without it)"
            } else {
                ""
            },
            setcap_hint()
        );
    }
    Ok(kind)
}

/// Gives up every capability once the sockets are open and the program is
/// attached, except CAP_SYS_NICE with `realtime` (the output stages move in
/// and out of SCHED_FIFO all along). Nothing later needs more: SIGHUP
/// re-reads files as the user; what linkem set on its interfaces (XDP
/// program through a BPF link, promiscuous mode through socket membership)
/// is undone by the kernel when the sockets close. Call before starting
/// the pipeline threads: capabilities are per thread and inherited.
pub fn drop_capabilities(realtime: bool) -> Result<()> {
    let keep = if realtime {
        CapSet::of(&[Cap::SYS_NICE])
    } else {
        CapSet::default()
    };
    caps::limit(keep, keep)
        .map(|_| ())
        .map_err(|e| anyhow!("cannot drop capabilities: {e}"))
}

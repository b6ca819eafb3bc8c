//! Which packet I/O the bridge opens an interface with (`--backend`), the
//! interfaces' claim, and the capabilities each backend needs. The ports
//! themselves live beside their sockets (`linkem_io::afpacket::port`,
//! `linkem_io::afxdp::port`).
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
use linkem_io::caps::{self, Cap, CapSet};
pub use linkem_io::port::{Halves, Rings};
use linkem_io::{afpacket, afxdp, ifaces};

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

/// Opens `ifname` with the chosen backend. Returns the receive half, the send
/// half and a description of what was opened and set.
pub fn open_interface(kind: BackendKind, ifname: &str, mtu: u32) -> Result<Halves> {
    open_interface_with(kind, ifname, mtu, Rings::Full, false)
}

/// [`open_interface`] with rings of the given size, and a kernel path
/// (`linkem_io::kernel_path`) where `kernel_path` and the machine allow.
pub fn open_interface_with(
    kind: BackendKind,
    ifname: &str,
    mtu: u32,
    rings: Rings,
    kernel_path: bool,
) -> Result<Halves> {
    match kind {
        BackendKind::Packet => Ok(afpacket::port::open(ifname, mtu, rings, kernel_path)?),
        BackendKind::Xdp => Ok(afxdp::port::open(ifname, mtu, rings, kernel_path)?),
        BackendKind::Auto => match afxdp::port::open(ifname, mtu, rings, kernel_path) {
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
                    "linkem: {ifname}: --backend auto chose AF_PACKET: AF_XDP did not open ({:#})",
                    anyhow::Error::from(e)
                );
                Ok(afpacket::port::open(ifname, mtu, rings, kernel_path)?)
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

/// What a backend needs, as setcap names it (`auto` as much as AF_XDP).
fn needed_caps(kind: BackendKind) -> Vec<Cap> {
    match kind {
        BackendKind::Packet => afpacket::NEEDED_CAPS.to_vec(),
        BackendKind::Xdp | BackendKind::Auto => afxdp::needed_caps(),
    }
}

/// The names of the capabilities of `need` this process lacks.
fn lacking(need: &[Cap]) -> Result<Vec<String>> {
    Ok(caps::lacking(need)?.iter().map(|c| c.to_string()).collect())
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
    let mut kind = kind;
    if kind == BackendKind::Auto {
        let lacking = lacking(&needed_caps(BackendKind::Xdp))?;
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
    let lacking = lacking(&need)?;
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

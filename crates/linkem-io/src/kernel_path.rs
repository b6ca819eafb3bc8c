//! The kernel path of a port: a tcx ingress program on the port's interface
//! that, while user space has switched it on, forwards each frame out of the
//! other interface of the pair (`bpf_redirect`) and counts it, and a gate
//! that keeps those frames from user space ([`linkem_core::port::KernelPath`]).
//!
//! Why: a frame that finds linkem idle costs a wake-up of the live stage,
//! 50-100 µs on a VM whose vCPU halted, where the Linux bridge forwards in
//! the sender's own context. For a direction whose model is a pass-through
//! (no delay, rate, loss, or anything else a packet could meet), the kernel
//! forwarding it at once is exactly the model's outcome, without that cost.
//!
//! The gate ([`bpf::GATE_SKIP`], [`bpf::GATE_TARGET`]) is read by three
//! programs at every frame:
//! - AF_XDP: the port's XDP program passes frames to the stack while
//!   `skip` is set ([`bpf::xdp_gated_program`]), where the tc program
//!   forwards them to `target`. The XDP program alone decides, so switching
//!   (one map write) neither loses nor doubles a frame; `target` stays set
//!   once engaged.
//! - AF_PACKET: the packet socket sees a frame before tc does, on the same
//!   `sk_buff`. Its filter ([`bpf::socket_gate_program`]) drops frames while
//!   `skip` is set, and writes what it decided into the frame's `cb` words:
//!   taken, or left to be forwarded to `target`. The tc program follows that
//!   mark, and reads the gate itself only for a frame without one. Switching
//!   on writes `target` then `skip`, switching off `skip` then `target`, so
//!   `skip` is never set without a target: a frame that crosses a switch
//!   goes one way only, never both (sent twice) and never neither.
//!
//! The tc program is loaded (and checked by the verifier) when the port
//! opens, and attached the first time the path is switched on, then kept
//! attached, switched off by the gate: a link that is never a pass-through
//! (most links have a delay) has no program on its interface, costs no map
//! lookup in tc per frame and no detach when linkem stops (the kernel
//! detaches a tcx program under its RTNL lock after an RCU grace period,
//! about 10 ms here, one interface after the other). Switching off never
//! detaches: it is done in the turn that applies a change, where 10 ms
//! would hold every frame of the stage back.
//!
//! Every object is held by fd: the kernel detaches the tc program when the
//! link closes, also when linkem is killed.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use std::sync::Arc;

use linkem_core::port::{KernelCounter, KernelCounts, KernelPath};

use crate::bpf::{self, BpfError, ProgKind, GATE_SKIP, GATE_TARGET};

/// Name of the tc program as `bpftool prog` shows it.
pub const TC_PROGRAM_NAME: &str = "linkem_kpath";

/// What a port with a kernel path adds to the start-up line that says what
/// was opened and set.
pub const OPENED_NOTE: &str =
    ", tc program linkem_kpath loaded (the kernel path: attached when a direction is a pass-through)";

/// Which receive path the gate must keep frames from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// The port's XDP program ([`bpf::xdp_gated_program`]).
    Xdp,
    /// A socket filter on its AF_PACKET receive socket
    /// ([`Kernel::attach_socket_filter`]).
    PacketSocket,
}

/// One port's kernel path: the gate and counts maps, and the tc program,
/// attached to the port's interface once first switched on.
pub struct Kernel {
    ifname: String,
    ifindex: u32,
    gate_kind: Gate,
    gate: OwnedFd,
    /// The mark the socket filter writes and the tc program trusts.
    token: u32,
    counts: Arc<Counts>,
    // Field order: the link closes (detaching the program) before the maps.
    tc_link: Option<OwnedFd>,
    tc_prog: OwnedFd,
    filter: Option<OwnedFd>,
}

impl Kernel {
    /// Creates the maps and loads the tc program for `ifname`'s tcx ingress
    /// hook, switched off and not yet attached ([`KernelPath::engage`]
    /// attaches it). Fails on a kernel before 6.6 (no tcx) or without
    /// CAP_BPF and CAP_NET_ADMIN: the port then has no kernel path.
    pub fn open(ifname: &str, ifindex: u32, gate_kind: Gate) -> Result<Self, BpfError> {
        let gate = bpf::create_array("linkem_gate", 4, 2, false)?;
        let counts = bpf::create_array("linkem_kcounts", bpf::KERNEL_COUNTS_BYTES, 1, true)?;
        let token = mark_token();
        let insns = bpf::tc_forward_program(gate.as_raw_fd(), counts.as_raw_fd(), token);
        let prog = bpf::load_program(ProgKind::TcxIngress, TC_PROGRAM_NAME, &insns, 0)?;
        Ok(Kernel {
            ifname: ifname.to_string(),
            ifindex,
            gate_kind,
            gate,
            token,
            counts: Arc::new(Counts(counts)),
            tc_link: None,
            tc_prog: prog,
            filter: None,
        })
    }

    /// Whether the tc program is attached to the interface (it is from the
    /// first [`KernelPath::engage`] on).
    pub fn attached(&self) -> bool {
        self.tc_link.is_some()
    }

    /// The gate map, for the XDP program to read.
    pub fn gate_fd(&self) -> BorrowedFd<'_> {
        self.gate.as_fd()
    }

    /// Attaches the gate's filter to the AF_PACKET receive socket `socket`.
    pub fn attach_socket_filter(&mut self, socket: RawFd) -> Result<(), BpfError> {
        let insns = bpf::socket_gate_program(self.gate.as_raw_fd(), self.token);
        let prog = bpf::load_program(ProgKind::SocketFilter, "linkem_kgate", &insns, 0)?;
        let fd = prog.as_raw_fd();
        // Safety: a valid socket fd, and a pointer to a live c_int of the size given.
        let rc = unsafe {
            libc::setsockopt(
                socket,
                libc::SOL_SOCKET,
                libc::SO_ATTACH_BPF,
                &fd as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(BpfError::new(
                "setsockopt(SO_ATTACH_BPF)",
                self.ifname.clone(),
                std::io::Error::last_os_error(),
            ));
        }
        self.filter = Some(prog);
        Ok(())
    }

    /// Opens the kernel path of a port, or says in one line why it has none
    /// (on standard error: the port works without it, every frame through
    /// user space).
    pub fn open_or_say(ifname: &str, gate_kind: Gate) -> Option<Self> {
        let ifindex = match crate::ifaces::lookup(ifname) {
            Ok(i) => i.index,
            Err(e) => {
                eprintln!("linkem: {ifname}: no kernel path ({e})");
                return None;
            }
        };
        match Self::open(ifname, ifindex, gate_kind) {
            Ok(k) => Some(k),
            // Without CAP_BPF (a user's own namespaces): as documented, no
            // kernel path, nothing to say at every start.
            Err(e) if e.errno() == libc::EPERM => None,
            Err(e) => {
                eprintln!(
                    "linkem: {ifname}: no kernel path for pass-through links, every frame \
                     goes through linkem ({e})"
                );
                None
            }
        }
    }

    fn set(&self, key: u32, value: u32) -> std::io::Result<()> {
        bpf::map_update_u32(self.gate.as_fd(), key, value).map_err(|e| {
            std::io::Error::new(
                e.source.kind(),
                format!("kernel path of '{}': {e}", self.ifname),
            )
        })
    }
}

impl KernelPath for Kernel {
    fn engage(&mut self, egress_ifindex: u32) -> std::io::Result<()> {
        if self.tc_link.is_none() {
            // The gate is off: attached, the program passes every frame on.
            let link = bpf::link_tcx_ingress(self.tc_prog.as_fd(), self.ifindex, &self.ifname)
                .map_err(|e| {
                    std::io::Error::new(
                        e.source.kind(),
                        format!("kernel path of '{}': {e}", self.ifname),
                    )
                })?;
            self.tc_link = Some(link);
        }
        self.set(GATE_TARGET, egress_ifindex)?;
        self.set(GATE_SKIP, 1)
    }

    fn disengage(&mut self) -> std::io::Result<()> {
        self.set(GATE_SKIP, 0)?;
        if self.gate_kind == Gate::PacketSocket {
            self.set(GATE_TARGET, 0)?;
        }
        Ok(())
    }

    fn counter(&self) -> Arc<dyn KernelCounter> {
        self.counts.clone()
    }
}

/// A random token for one port's mark: another port's filter, in this
/// linkem or in one before it on the path, writes another.
fn mark_token() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS's random source once per process
    // and stepped for each new state: distinct ports get distinct tokens.
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish() as u32
}

/// The per-CPU counts map, summed over the CPUs when read.
struct Counts(OwnedFd);

impl KernelCounter for Counts {
    fn counts(&self) -> std::io::Result<KernelCounts> {
        let raw = bpf::map_lookup_percpu(self.0.as_fd(), 0, bpf::KERNEL_COUNTS_BYTES)
            .map_err(|e| std::io::Error::new(e.source.kind(), e.to_string()))?;
        let mut sum = KernelCounts::default();
        for cpu in raw.chunks_exact(bpf::KERNEL_COUNTS_BYTES as usize) {
            let field = |i: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&cpu[i * 8..i * 8 + 8]);
                u64::from_ne_bytes(b)
            };
            sum.frames += field(0);
            sum.wire_frames += field(1);
            sum.wire_bytes += field(2);
            sum.too_big += field(3);
        }
        Ok(sum)
    }
}

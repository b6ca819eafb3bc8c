//! The XDP side of the backend: the XSKMAP (one entry per receive queue,
//! holding that queue's socket), the program that redirects each frame to
//! the entry of its `rx_queue_index`, and the BPF link that attaches it.
//!
//! Attaching through a BPF link rather than netlink means the kernel
//! detaches the program when the link's last fd closes, also when linkem is
//! killed (docs/platform.md pitfall 2): a restart never finds a stale program.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use super::{bpf_error, AfXdpConfig};
use crate::afpacket::IoError;
use crate::bpf::{self, BpfError, RxClock, XdpMode};

/// Name of the program as `bpftool prog` and `ip link` show it.
pub const PROGRAM_NAME: &str = "linkem_xsk";

/// The map, the program and, once attached, the link. Dropping it takes the
/// sockets out of the map (see [`Drop`]) and then detaches the program.
pub(super) struct Attachment {
    pub(super) link: Option<OwnedFd>,
    pub(super) prog: OwnedFd,
    pub(super) map: OwnedFd,
    pub(super) rx_clock: RxClock,
    /// Keys 0..keys of the map hold sockets.
    keys: u32,
}

impl Attachment {
    /// Creates the map with `entries` keys and loads the program for it,
    /// behind the kernel path's gate map if `gate` ([`bpf::xdp_gated_program`]).
    /// `multi_buffer`: load it as frags-aware ([`bpf::BPF_F_XDP_HAS_FRAGS`]).
    pub(super) fn load(
        ifname: &str,
        entries: u32,
        multi_buffer: bool,
        gate: Option<RawFd>,
    ) -> Result<Self, IoError> {
        let map = bpf::create_xskmap("linkem_xsks", entries).map_err(|e| bpf_error(e, ifname))?;
        let flags = if multi_buffer {
            bpf::BPF_F_XDP_HAS_FRAGS
        } else {
            0
        };
        let (prog, rx_clock) =
            load_program(map.as_raw_fd(), flags, gate).map_err(|e| bpf_error(e, ifname))?;
        Ok(Attachment {
            link: None,
            prog,
            map,
            rx_clock,
            keys: 0,
        })
    }

    /// `map[queue] = socket`.
    pub(super) fn add_socket(
        &mut self,
        ifname: &str,
        queue: u32,
        fd: RawFd,
    ) -> Result<(), IoError> {
        bpf::map_update_u32(self.map.as_fd(), queue, fd as u32)
            .map_err(|e| bpf_error(e, ifname))?;
        self.keys = self.keys.max(queue + 1);
        Ok(())
    }

    /// Attaches the program to the interface's XDP hook.
    pub(super) fn attach(
        &mut self,
        ifname: &str,
        ifindex: u32,
        cfg: &AfXdpConfig,
    ) -> Result<XdpMode, IoError> {
        let (link, mode) = match cfg.xdp_mode {
            None => bpf::attach_xdp(self.prog.as_fd(), ifindex, ifname),
            Some(mode) => {
                bpf::link_xdp(self.prog.as_fd(), ifindex, ifname, mode).map(|l| (l, mode))
            }
        }
        .map_err(|e| bpf_error(e, ifname))?;
        self.link = Some(link);
        Ok(mode)
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        // The map holds a reference to each socket until the map itself is
        // freed, which the kernel defers; taking the sockets out now lets
        // their close release the queues at once. Failure changes nothing.
        for key in 0..self.keys {
            let _ = bpf::map_delete_u32(self.map.as_fd(), key);
        }
        // Then the link closes (field order): the program is detached.
    }
}

/// The program with TAI stamps, or with MONOTONIC stamps on kernels before
/// 6.1 (which do not know helper 208).
fn load_program(
    map_fd: RawFd,
    flags: u32,
    gate: Option<RawFd>,
) -> Result<(OwnedFd, RxClock), BpfError> {
    let program = |clock| match gate {
        Some(g) => bpf::xdp_gated_program(map_fd, clock, g),
        None => bpf::xdp_redirect_program(map_fd, clock),
    };
    let tai = program(RxClock::Tai);
    match bpf::load_xdp_program_flags(PROGRAM_NAME, &tai, flags) {
        Ok(fd) => Ok((fd, RxClock::Tai)),
        Err(e) if e.errno() == libc::EPERM => Err(e),
        Err(tai_err) => {
            let mono = program(RxClock::Monotonic);
            match bpf::load_xdp_program_flags(PROGRAM_NAME, &mono, flags) {
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

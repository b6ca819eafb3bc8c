//! Facts about a network interface and the few things linkem holds on its
//! own two interfaces, as safe functions over the ioctls and sockets that
//! provide them, so that the `linkem` binary needs no `unsafe`.
//!
//! - [`lookup`]: index, MTU and flags of an interface in the caller's
//!   network namespace (ioctls answer for the caller's namespace; `/sys`
//!   answers for the namespace it was mounted in, which is why this does not
//!   read `/sys`). Both packet backends and the bridge use it.
//! - [`driver_name`] (`ETHTOOL_GDRVINFO`) and [`rx_queue_count`]
//!   (`ETHTOOL_GCHANNELS`: the receive queues an AF_XDP socket must be bound
//!   to, one each).
//! - [`InterfaceLock`]: one linkem per interface, held as a packet socket
//!   bound to the interface and alone in a packet fanout group whose id is
//!   derived from the interface index (`PACKET_FANOUT` with
//!   `max_num_members = 1`, Linux 5.9+); a second member is refused by the
//!   kernel with `ENOSPC`. Why this and not a name anyone may take:
//!   - only a process with `CAP_NET_RAW` in the interface's network
//!     namespace can open a packet socket, so an unprivileged user cannot
//!     take the lock first and deny linkem the interface (an abstract unix
//!     socket, linkem's old lock `@linkem/if/IFINDEX`, could be bound by
//!     anyone); linkem needs `CAP_NET_RAW` for either backend anyway, and has
//!     it when it claims the interfaces, as root or through file
//!     capabilities alike;
//!   - no file is involved, so no directory (such as `/run/linkem`) that a
//!     non-root linkem would have to be able to write, and nothing is left
//!     behind: the kernel drops the group when the socket closes, even on
//!     SIGKILL, so a restart after `kill -9` works at once;
//!   - fanout groups belong to a network namespace, as interface indices do,
//!     and the membership outlives the interface going down and up.
//!
//!   The socket receives nothing: it is bound to an EtherType no protocol
//!   uses ([`LOCK_ETHERTYPE`]) and a one-instruction filter drops even those
//!   frames. Group ids are 16 bits: id = [`LOCK_FANOUT_BASE`] + index mod
//!   2^16, so two interfaces of one namespace whose indices differ by a
//!   multiple of 65536, or another program that uses the same group id, make
//!   the lock fail with a message that says so (`EINVAL`), never succeed
//!   twice.
//! - [`Promiscuous`]: promiscuous mode through a packet socket's
//!   `PACKET_MR_PROMISC` membership. The kernel counts such memberships and
//!   drops them when the socket closes, however the process ends, so the
//!   interface goes back to what it was without any cleanup code.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::afpacket::IoError;

/// What [`lookup`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    /// The interface name as looked up (shorter than `IFNAMSIZ`, 16 bytes with NUL).
    pub name: String,
    /// The interface index (`if_nametoindex`), never 0; unique only within the
    /// caller's network namespace, and reused after the interface is deleted.
    pub index: u32,
    /// The MTU in bytes (`SIOCGIFMTU`): the largest L3 packet, without the 14-byte
    /// Ethernet header.
    pub mtu: u32,
    /// `IFF_*` flags (`SIOCGIFFLAGS`) as read at lookup time; they are not refreshed.
    pub flags: u32,
}

impl Iface {
    /// Whether `IFF_UP` was set (administratively up; the carrier may still be down).
    pub fn is_up(&self) -> bool {
        self.flags & libc::IFF_UP as u32 != 0
    }

    /// Whether it is a loopback interface (`IFF_LOOPBACK`).
    pub fn is_loopback(&self) -> bool {
        self.flags & libc::IFF_LOOPBACK as u32 != 0
    }
}

fn dgram_socket() -> io::Result<OwnedFd> {
    // Safety: plain socket(2) call; the result is checked.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // Safety: raw is a fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Index, MTU and flags of `ifname`. The name must exist; whether it is up
/// is the caller's question ([`Iface::is_up`]).
pub fn lookup(ifname: &str) -> Result<Iface, IoError> {
    let index = crate::afpacket::index_of(ifname)?;
    let sys = |call, e| IoError::Sys {
        call,
        ifname: ifname.to_string(),
        source: e,
    };
    let probe = dgram_socket().map_err(|e| sys("socket(AF_INET)", e))?;
    let mut req = crate::sys::ifreq(ifname);
    // Safety: req is a valid ifreq with the name set; SIOCGIFFLAGS writes ifru_flags.
    if unsafe { libc::ioctl(probe.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(sys("ioctl(SIOCGIFFLAGS)", io::Error::last_os_error()));
    }
    // Safety: SIOCGIFFLAGS filled the flags member of the union.
    let flags = unsafe { req.ifr_ifru.ifru_flags } as u16 as u32;
    // Safety: as above; SIOCGIFMTU writes ifru_mtu.
    if unsafe { libc::ioctl(probe.as_raw_fd(), libc::SIOCGIFMTU, &mut req) } < 0 {
        return Err(sys("ioctl(SIOCGIFMTU)", io::Error::last_os_error()));
    }
    // Safety: SIOCGIFMTU filled the mtu member of the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu } as u32;
    Ok(Iface {
        name: ifname.to_string(),
        index,
        mtu,
        flags,
    })
}

/// The MTU in bytes of the interface with index `index` (its name by
/// `if_indextoname`, then `SIOCGIFMTU`): for callers that know an index only,
/// such as a netfilter queue's `NFQA_IFINDEX_OUTDEV`.
pub fn mtu_of_index(index: u32) -> io::Result<u32> {
    let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
    // Safety: `name` has IF_NAMESIZE bytes, as if_indextoname requires.
    if unsafe { libc::if_indextoname(index, name.as_mut_ptr()) }.is_null() {
        return Err(io::Error::last_os_error());
    }
    let probe = dgram_socket()?;
    // Safety: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { zeroed() };
    let n = req.ifr_name.len();
    req.ifr_name.copy_from_slice(&name[..n]);
    // Safety: req is a valid ifreq with the name set; SIOCGIFMTU writes ifru_mtu.
    if unsafe { libc::ioctl(probe.as_raw_fd(), libc::SIOCGIFMTU, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // Safety: SIOCGIFMTU filled the mtu member of the union.
    Ok(unsafe { req.ifr_ifru.ifru_mtu } as u32)
}

/// Like [`lookup`], and an error if the interface is down.
pub fn lookup_up(ifname: &str) -> Result<Iface, IoError> {
    let iface = lookup(ifname)?;
    if !iface.is_up() {
        return Err(IoError::InterfaceDown {
            ifname: ifname.to_string(),
        });
    }
    Ok(iface)
}

const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// One SIOCETHTOOL call: `data` starts with the command word.
fn ethtool<T>(ifname: &str, data: &mut T) -> io::Result<()> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    let fd = dgram_socket()?;
    let mut req = crate::sys::ifreq(ifname);
    req.ifr_ifru.ifru_data = (data as *mut T).cast();
    // Safety: SIOCETHTOOL reads the name and the command at the start of
    // `data`, and writes at most size_of::<T>() bytes there (each caller's T
    // is the kernel's struct for its command); `data` outlives the call.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCETHTOOL, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The kernel driver behind an interface (`ETHTOOL_GDRVINFO`), if it says.
pub fn driver_name(ifname: &str) -> Option<String> {
    /// `struct ethtool_drvinfo`.
    #[repr(C)]
    struct DrvInfo {
        cmd: u32,
        driver: [u8; 32],
        rest: [u8; 32 * 4 + 12 + 20],
    }
    let mut info = DrvInfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        rest: [0; 32 * 4 + 12 + 20],
    };
    ethtool(ifname, &mut info).ok()?;
    let end = info.driver.iter().position(|&b| b == 0).unwrap_or(32);
    Some(String::from_utf8_lossy(&info.driver[..end]).into_owned())
}

/// `struct ethtool_channels`.
#[repr(C)]
#[derive(Default)]
struct Channels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// Receive queues of an interface: the driver's current rx + combined
/// channels (`ethtool -l`), else the `rx-N` entries under
/// `/sys/class/net/IF/queues` (same namespace only), else 1.
pub fn rx_queue_count(ifname: &str) -> u32 {
    let mut ch = Channels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    if ethtool(ifname, &mut ch).is_ok() {
        let n = ch.rx_count + ch.combined_count;
        if n > 0 {
            return n;
        }
    }
    let dir = std::path::Path::new("/sys/class/net")
        .join(ifname)
        .join("queues");
    let from_sysfs = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32
        })
        .unwrap_or(0);
    from_sysfs.max(1)
}

/// The EtherType the lock's socket is bound to: IEEE 802 "local experimental
/// EtherType 2", which no protocol uses, so the socket sees no traffic.
pub const LOCK_ETHERTYPE: u16 = 0x88b6;

/// The first of linkem's fanout group ids (`"lk"` in ASCII); the lock of
/// interface index `i` uses `LOCK_FANOUT_BASE + i` (mod 2^16). Far from the
/// small ids other programs pick by hand (Suricata's default is 99).
pub const LOCK_FANOUT_BASE: u16 = 0x6c6b;

/// `struct fanout_args` (linux/if_packet.h): the kernel's field order follows
/// the byte order, so that `id` overlays the low 16 bits of the older `int`
/// argument.
#[repr(C)]
#[derive(Clone, Copy)]
struct FanoutArgs {
    #[cfg(target_endian = "little")]
    id: u16,
    type_flags: u16,
    #[cfg(target_endian = "big")]
    id: u16,
    max_num_members: u32,
}

/// Held while linkem uses an interface; see the module docs.
#[derive(Debug)]
pub struct InterfaceLock {
    _sock: OwnedFd,
    /// What holds the lock, as [`InterfaceLock::name_for`] gives it, for messages.
    pub name: String,
}

/// Why [`InterfaceLock::take`] failed.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process in this network namespace holds the lock (its group
    /// already has its one member): another linkem, or this process itself.
    #[error(
        "interface '{ifname}' is already in use by another linkem (it holds the lock, {name}; \
         `ss -0p` lists the processes with packet sockets)"
    )]
    Held {
        /// The interface's name.
        ifname: String,
        /// The lock, as [`InterfaceLock::name_for`] gives it.
        name: String,
    },
    /// Opening a packet socket was refused: the lock, as both backends,
    /// needs `CAP_NET_RAW`.
    #[error("cannot take the lock for interface '{ifname}': a packet socket needs CAP_NET_RAW")]
    NoPermission {
        /// The interface's name.
        ifname: String,
    },
    /// The group id is taken by a group of another kind: another program's,
    /// or the lock of an interface whose index equals this one's mod 65536.
    #[error(
        "cannot take the lock for interface '{ifname}': {name} is used by another program \
         (or by the lock of an interface whose index is the same mod 65536)"
    )]
    Clash {
        /// The interface's name.
        ifname: String,
        /// The lock, as [`InterfaceLock::name_for`] gives it.
        name: String,
    },
    /// A system call failed for another reason.
    #[error("cannot take the lock for interface '{ifname}': {call}: {source}")]
    Sys {
        /// The interface's name.
        ifname: String,
        /// The call that failed.
        call: &'static str,
        /// The system's error.
        #[source]
        source: io::Error,
    },
}

impl InterfaceLock {
    /// The fanout group id of `iface`'s lock (see the module docs).
    pub fn group_for(iface: &Iface) -> u16 {
        LOCK_FANOUT_BASE.wrapping_add(iface.index as u16)
    }

    /// The lock's description for messages: its packet fanout group.
    pub fn name_for(iface: &Iface) -> String {
        format!(
            "packet fanout group {} on ifindex {}",
            InterfaceLock::group_for(iface),
            iface.index
        )
    }

    /// Takes the lock of `iface` or says that another process holds it.
    /// Needs `CAP_NET_RAW`.
    pub fn take(iface: &Iface) -> Result<InterfaceLock, LockError> {
        let name = InterfaceLock::name_for(iface);
        let ifname = || iface.name.clone();
        let sys = |call, source: io::Error| match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => LockError::NoPermission { ifname: ifname() },
            _ => LockError::Sys {
                ifname: ifname(),
                call,
                source,
            },
        };
        let proto_be = LOCK_ETHERTYPE.to_be();
        // Safety: plain socket(2) call; the result is checked.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                proto_be as libc::c_int,
            )
        };
        if raw < 0 {
            return Err(sys("socket(AF_PACKET)", io::Error::last_os_error()));
        }
        // Safety: raw is a fresh fd owned by nobody else.
        let sock = unsafe { OwnedFd::from_raw_fd(raw) };
        // "ret #0": accept no byte of any frame, so nothing is ever queued.
        let mut drop_all = [libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        }];
        let prog = libc::sock_fprog {
            len: drop_all.len() as u16,
            filter: drop_all.as_mut_ptr(),
        };
        crate::sys::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &prog,
        )
        .map_err(|e| sys("setsockopt(SO_ATTACH_FILTER)", e))?;
        // Safety: sockaddr_ll is plain data; all-zero is valid.
        let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto_be;
        sll.sll_ifindex = iface.index as i32;
        // Safety: sll is a valid sockaddr_ll and the length is its size.
        let r = unsafe {
            libc::bind(
                sock.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(sys("bind(AF_PACKET)", io::Error::last_os_error()));
        }
        let args = FanoutArgs {
            id: InterfaceLock::group_for(iface),
            type_flags: libc::PACKET_FANOUT_HASH as u16,
            max_num_members: 1,
        };
        if let Err(e) = crate::sys::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_FANOUT,
            &args,
        ) {
            return Err(match e.raw_os_error() {
                // The group exists and has its one member.
                Some(libc::ENOSPC) => LockError::Held {
                    ifname: ifname(),
                    name,
                },
                // The group exists with another kind, protocol or device.
                Some(libc::EINVAL) => LockError::Clash {
                    ifname: ifname(),
                    name,
                },
                _ => sys("setsockopt(PACKET_FANOUT)", e),
            });
        }
        Ok(InterfaceLock { _sock: sock, name })
    }
}

/// Promiscuous mode on an interface while this lives (see the module docs).
#[derive(Debug)]
pub struct Promiscuous {
    _sock: OwnedFd,
}

impl Promiscuous {
    /// Needs CAP_NET_RAW (a packet socket). The socket is never bound to a
    /// protocol, so it receives nothing.
    pub fn on(iface: &Iface) -> Result<Promiscuous, IoError> {
        let sys = |call, e: io::Error| match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => IoError::PermissionDenied {
                call,
                ifname: iface.name.clone(),
            },
            _ => IoError::Sys {
                call,
                ifname: iface.name.clone(),
                source: e,
            },
        };
        // Protocol 0: no frame is delivered to this socket.
        // Safety: plain socket(2) call; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(sys("socket(AF_PACKET)", io::Error::last_os_error()));
        }
        // Safety: raw is a fresh fd owned by nobody else.
        let sock = unsafe { OwnedFd::from_raw_fd(raw) };
        // Safety: packet_mreq is plain data; all-zero is valid.
        let mut mreq: libc::packet_mreq = unsafe { zeroed() };
        mreq.mr_ifindex = iface.index as libc::c_int;
        mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
        crate::sys::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            &mreq,
        )
        .map_err(|e| sys("setsockopt(PACKET_ADD_MEMBERSHIP, PACKET_MR_PROMISC)", e))?;
        Ok(Promiscuous { _sock: sock })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_found_and_known_as_loopback() {
        let lo = lookup("lo").unwrap();
        assert!(lo.is_loopback());
        assert!(lo.index > 0);
        assert_ne!(driver_name("lo").as_deref(), Some("veth"));
        assert!(rx_queue_count("lo") >= 1);
        assert_eq!(mtu_of_index(lo.index).unwrap(), lo.mtu);
        assert!(mtu_of_index(u32::MAX).is_err());
    }

    #[test]
    fn missing_and_malformed_names_are_named() {
        for name in ["linkem-nope0", "", "a-name-longer-than-ifnamsiz", "a\0b"] {
            let e = lookup(name).unwrap_err();
            assert!(
                matches!(e, IoError::NoSuchInterface { .. }),
                "{name:?}: {e}"
            );
        }
        assert_eq!(driver_name("linkem-nope0"), None);
        assert_eq!(rx_queue_count("linkem-nope0"), 1);
    }

    /// Runs in a network namespace of its own (a thread's `unshare`), so
    /// that a linkem or a test elsewhere on the machine holding the lock of
    /// the host's `lo` cannot collide with it. Needs CAP_SYS_ADMIN and
    /// CAP_NET_RAW: skipped, with a note, without them.
    #[test]
    fn a_lock_is_exclusive_and_freed_on_drop() {
        crate::in_own_net_namespace(|| {
            // The new namespace's loopback: always there. The lock does not
            // care what the interface is (the bridge refuses loopback before).
            let lo = lookup("lo").unwrap();
            let held = match InterfaceLock::take(&lo) {
                Err(LockError::NoPermission { .. }) => {
                    eprintln!("skipped: needs CAP_NET_RAW");
                    return;
                }
                r => r.unwrap(),
            };
            let e = InterfaceLock::take(&lo).unwrap_err();
            assert!(matches!(e, LockError::Held { .. }), "{e}");
            assert!(
                e.to_string().contains("already in use by another linkem"),
                "{e}"
            );
            drop(held);
            InterfaceLock::take(&lo).unwrap();
        });
    }
}

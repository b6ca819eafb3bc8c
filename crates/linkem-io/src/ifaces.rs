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
//! - [`InterfaceLock`]: one linkem per interface. The lock is an abstract
//!   unix socket named after the interface's index, bound by the holder.
//!   Abstract socket names belong to a network namespace, as interface
//!   indices do, need no file (so no directory a non-root user must be able
//!   to write) and vanish when the holder's last fd closes, even on SIGKILL,
//!   so a killed linkem never leaves a stale lock behind.
//! - [`Promiscuous`]: promiscuous mode through a packet socket's
//!   `PACKET_MR_PROMISC` membership. The kernel counts such memberships and
//!   drops them when the socket closes, however the process ends, so the
//!   interface goes back to what it was without any cleanup code.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

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

fn ifreq(ifname: &str) -> libc::ifreq {
    // Safety: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(ifname.bytes()) {
        *dst = src as libc::c_char;
    }
    req
}

/// Index, MTU and flags of `ifname`. The name must exist; whether it is up
/// is the caller's question ([`Iface::is_up`]).
pub fn lookup(ifname: &str) -> Result<Iface, IoError> {
    let no_such = || IoError::NoSuchInterface {
        ifname: ifname.to_string(),
    };
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
        return Err(no_such());
    }
    let cname = CString::new(ifname).map_err(|_| no_such())?;
    // Safety: cname is a valid NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        return Err(no_such());
    }
    let sys = |call, e| IoError::Sys {
        call,
        ifname: ifname.to_string(),
        source: e,
    };
    let probe = dgram_socket().map_err(|e| sys("socket(AF_INET)", e))?;
    let mut req = ifreq(ifname);
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
    let mut req = ifreq(ifname);
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

/// Held while linkem uses an interface; see the module docs.
#[derive(Debug)]
pub struct InterfaceLock {
    _sock: OwnedFd,
    /// The lock's abstract socket name as [`InterfaceLock::name_for`] gives it
    /// (`@linkem/if/INDEX`).
    pub name: String,
}

/// Why [`InterfaceLock::take`] failed.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The lock is already held in this network namespace, by another linkem or
    /// by this process itself (`bind` said `EADDRINUSE`).
    #[error(
        "interface '{ifname}' is already in use by another linkem (it holds the lock {name}; \
         `ss -xlp | grep linkem` shows which process)"
    )]
    Held {
        /// The interface's name.
        ifname: String,
        /// The lock's socket name, for `ss -xlp`.
        name: String,
    },
    /// Creating or binding the lock's socket failed for another reason.
    #[error("cannot take the lock for interface '{ifname}': {source}")]
    Sys {
        /// The interface's name.
        ifname: String,
        /// The system's error from `socket` or `bind`.
        #[source]
        source: io::Error,
    },
}

impl InterfaceLock {
    /// The lock's socket name, shown with an `@` as `ss -xl` does.
    pub fn name_for(iface: &Iface) -> String {
        format!("@linkem/if/{}", iface.index)
    }

    /// Takes the lock of `iface` or says that another process holds it.
    pub fn take(iface: &Iface) -> Result<InterfaceLock, LockError> {
        let name = InterfaceLock::name_for(iface);
        let sys = |source| LockError::Sys {
            ifname: iface.name.clone(),
            source,
        };
        // Safety: plain socket(2) call; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(sys(io::Error::last_os_error()));
        }
        // Safety: raw is a fresh fd owned by nobody else.
        let sock = unsafe { OwnedFd::from_raw_fd(raw) };
        // Safety: sockaddr_un is plain data; all-zero is valid.
        let mut sa: libc::sockaddr_un = unsafe { zeroed() };
        sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
        // Abstract: a leading NUL, then the name without '@'.
        let bytes = name.as_bytes();
        for (d, s) in sa.sun_path[1..].iter_mut().zip(&bytes[1..]) {
            *d = *s as libc::c_char;
        }
        let len = size_of::<libc::sa_family_t>() + bytes.len();
        // Safety: sa is a valid sockaddr_un; len covers the family and the name.
        let r = unsafe {
            libc::bind(
                sock.as_raw_fd(),
                &sa as *const libc::sockaddr_un as *const libc::sockaddr,
                len as libc::socklen_t,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EADDRINUSE) {
                return Err(LockError::Held {
                    ifname: iface.name.clone(),
                    name,
                });
            }
            return Err(sys(e));
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
        set_opt(
            sock.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            &mreq,
        )
        .map_err(|e| sys("setsockopt(PACKET_ADD_MEMBERSHIP, PACKET_MR_PROMISC)", e))?;
        Ok(Promiscuous { _sock: sock })
    }
}

fn set_opt<T>(fd: RawFd, level: libc::c_int, opt: libc::c_int, val: &T) -> io::Result<()> {
    // Safety: val points to a live T of the length given.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
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

    #[test]
    fn a_lock_is_exclusive_and_freed_on_drop() {
        // A made-up interface: index far above any real one.
        let iface = Iface {
            name: "test".into(),
            index: 4_000_000_000 - std::process::id(),
            mtu: 1500,
            flags: 0,
        };
        let held = InterfaceLock::take(&iface).unwrap();
        let e = InterfaceLock::take(&iface).unwrap_err();
        assert!(
            e.to_string().contains("already in use by another linkem"),
            "{e}"
        );
        drop(held);
        InterfaceLock::take(&iface).unwrap();
    }
}

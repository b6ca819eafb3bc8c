//! An interface's state as the kernel announces it, for ports whose own
//! socket hears nothing of their interface (an AF_XDP socket neither errors
//! nor wakes when its interface goes down).
//!
//! A [`LinkWatch`] is a netlink route socket joined to `RTMGRP_LINK`: it
//! becomes readable whenever an interface of its network namespace changes
//! (set up or down, deleted, moved, renamed). The live stage polls it beside
//! the port's sockets, which costs nothing while nothing changes, and asks
//! [`LinkWatch::state`] when it is readable. The notifications themselves
//! are read and thrown away: the state is asked again by ioctl on the same
//! socket, which answers for the socket's namespace (the one the caller was
//! in when it opened the watch, the interface's), so a stage thread in
//! another namespace still asks the right one.
//!
//! Gone means: no interface of that name, or one with another index (the
//! interface was deleted, moved to another namespace or renamed, and the
//! name may since have been reused).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::ifaces::Iface;

/// The state [`LinkWatch::state`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// `IFF_UP` set.
    Up,
    /// There, administratively down.
    Down,
    /// Deleted, moved to another namespace or renamed.
    Gone,
}

/// Notifications of one interface's state changes (see the module doc).
pub struct LinkWatch {
    fd: OwnedFd,
    ifname: String,
    ifindex: u32,
}

impl LinkWatch {
    /// Watches `iface`, in the caller's network namespace.
    pub fn open(iface: &Iface) -> io::Result<LinkWatch> {
        let fd = crate::sys::netlink_socket(
            libc::NETLINK_ROUTE,
            libc::SOCK_NONBLOCK,
            libc::RTMGRP_LINK as u32,
        )?;
        Ok(LinkWatch {
            fd,
            ifname: iface.name.clone(),
            ifindex: iface.index,
        })
    }

    /// Readable (poll's `POLLIN`) when an interface of the namespace changed
    /// since [`LinkWatch::state`] was last asked; `POLLERR` when the kernel
    /// dropped notifications (the next [`LinkWatch::state`] clears it).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The interface's state now; reads and discards the notifications
    /// waiting, so that the socket polls quiet until the next change.
    pub fn state(&self) -> LinkState {
        self.drain();
        let mut req = crate::sys::ifreq(&self.ifname);
        // Safety: req is a valid ifreq with the name set; SIOCGIFINDEX writes ifru_ifindex.
        if unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SIOCGIFINDEX, &mut req) } < 0 {
            return LinkState::Gone;
        }
        // Safety: SIOCGIFINDEX filled the ifindex member of the union.
        if unsafe { req.ifr_ifru.ifru_ifindex } as u32 != self.ifindex {
            return LinkState::Gone;
        }
        // Safety: as above; SIOCGIFFLAGS writes ifru_flags.
        if unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
            return LinkState::Gone;
        }
        // Safety: SIOCGIFFLAGS filled the flags member of the union.
        let flags = unsafe { req.ifr_ifru.ifru_flags } as libc::c_int;
        if flags & libc::IFF_UP != 0 {
            LinkState::Up
        } else {
            LinkState::Down
        }
    }

    fn drain(&self) {
        let mut buf = [0u8; 8192];
        loop {
            match crate::sys::recv(self.fd.as_raw_fd(), &mut buf, true) {
                Ok(0) => return,
                Ok(_) => {}
                // Notifications dropped: reported once and cleared; read on,
                // the state is asked after.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
                Err(_) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Whether `fd` polls readable within `timeout_ms`.
    fn readable_within(fd: RawFd, timeout_ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // Safety: one live pollfd, a bounded timeout.
        unsafe { libc::poll(&mut p, 1, timeout_ms) > 0 }
    }

    fn readable(fd: RawFd) -> bool {
        readable_within(fd, 1000)
    }

    fn readable_now(fd: RawFd) -> bool {
        readable_within(fd, 0)
    }

    fn ip(args: &[&str]) {
        let o = Command::new("ip").args(args).output().expect("ip");
        assert!(o.status.success(), "ip {args:?}: {o:?}");
    }

    /// In a network namespace of its own (this thread's): a veth end set
    /// down, up, then deleted; the watch wakes for each and says which.
    #[test]
    fn a_watch_hears_down_up_and_gone() {
        crate::in_own_net_namespace(|| {
            // A child process starts in the namespace of the thread that forks it.
            ip(&[
                "link", "add", "lkw0", "type", "veth", "peer", "name", "lkw1",
            ]);
            ip(&["link", "set", "lkw0", "up"]);
            let iface = crate::ifaces::lookup("lkw0").unwrap();
            let watch = LinkWatch::open(&iface).unwrap();
            assert_eq!(watch.state(), LinkState::Up);
            assert!(!readable_now(watch.fd()), "quiet while nothing changes");
            ip(&["link", "set", "lkw0", "down"]);
            assert!(readable(watch.fd()));
            assert_eq!(watch.state(), LinkState::Down);
            assert!(!readable_now(watch.fd()), "read: quiet again");
            ip(&["link", "set", "lkw0", "up"]);
            assert!(readable(watch.fd()));
            assert_eq!(watch.state(), LinkState::Up);
            ip(&["link", "del", "lkw1"]);
            assert!(readable(watch.fd()));
            assert_eq!(watch.state(), LinkState::Gone);
            // The name again, another interface: still gone.
            ip(&[
                "link", "add", "lkw0", "type", "veth", "peer", "name", "lkw1",
            ]);
            assert_eq!(watch.state(), LinkState::Gone);
        });
    }
}

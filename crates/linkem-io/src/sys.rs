//! Small safe wrappers over the system calls linkem needs beyond `std` (socket
//! options, clocks, kernel receive timestamps, signals to its own children), one of
//! each for every crate: the sockets of this crate, the runtime's clock and the binary,
//! which has no `unsafe` of its own. Each wrapper checks what the call needs and turns
//! failures into `io::Error`.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, RawFd};

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets socket option `name` of `level` on `fd` to `val`, a plain C value (an int, a
/// ring request, a membership) whose exact size is passed.
pub fn setsockopt<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    val: &T,
) -> io::Result<()> {
    // Safety: `val` points to a live `T` of `size_of::<T>()` bytes, which the kernel only
    // reads; it checks `level`/`name` and the length itself (EINVAL/ENOPROTOOPT otherwise).
    check(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (val as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })
}

/// Reads socket option `name` of `level` on `fd` into `val`; returns the length the
/// kernel wrote (at most `size_of::<T>()`).
///
/// # Safety
/// Every bit pattern the kernel may write must be a valid `T` (a plain C struct or
/// integer, as the option's `libc` type is).
pub(crate) unsafe fn getsockopt<T>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    val: &mut T,
) -> io::Result<usize> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // Safety: `val` is a writable `T` and `len` its size, so the kernel writes within it;
    // what it writes is a valid `T` (the caller's promise).
    check(unsafe { libc::getsockopt(fd, level, name, (val as *mut T).cast(), &mut len) })?;
    Ok(len as usize)
}

/// Sets an integer socket option.
pub fn set_int_option(
    sock: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    setsockopt(sock.as_raw_fd(), level, name, &value)
}

/// Now on `clock` (CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_TAI, ...), in ns; 0 for a
/// clock the kernel does not know.
#[inline]
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Safety: `ts` is a valid, writable timespec, which clock_gettime only writes to; an
    // unknown clock leaves it zero.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Asks for kernel receive timestamps (SO_TIMESTAMPNS, CLOCK_REALTIME) on `sock`.
pub fn enable_rx_timestamps(sock: &UdpSocket) -> io::Result<()> {
    set_int_option(sock, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
}

/// Sets the receive buffer to `bytes`: beyond the system limit if the process may
/// (SO_RCVBUFFORCE needs CAP_NET_ADMIN), else as far as the limit allows.
pub fn set_receive_buffer(sock: &impl AsRawFd, bytes: libc::c_int) -> io::Result<()> {
    set_int_option(sock, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, bytes)
        .or_else(|_| set_int_option(sock, libc::SOL_SOCKET, libc::SO_RCVBUF, bytes))
}

/// Sets the send buffer to `bytes`, as [`set_receive_buffer`] does the receive buffer.
pub fn set_send_buffer(sock: &impl AsRawFd, bytes: libc::c_int) -> io::Result<()> {
    set_int_option(sock, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, bytes)
        .or_else(|_| set_int_option(sock, libc::SOL_SOCKET, libc::SO_SNDBUF, bytes))
}

/// Receives one datagram into `buf` with its kernel receive timestamp (CLOCK_REALTIME
/// ns, 0 if the kernel gave none). `Ok(None)` when the socket's read timeout passed, it
/// would block, or a signal interrupted the wait.
pub fn recv_stamped(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<Option<(usize, u64)>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // u64 elements: cmsghdr needs 8-byte alignment.
    let mut control = [0u64; 16];
    // Safety: msghdr is plain data for which all zeroes is a valid (empty) value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // Safety: `msg` points at `iov` (which covers exactly `buf`) and at `control`, all
    // alive and exclusively borrowed for the call; the kernel writes within the lengths.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => {
                Ok(None)
            }
            _ => Err(e),
        };
    }
    let mut ts_ns = 0u64;
    // Safety: the CMSG macros walk the control buffer the kernel filled, bounded by
    // msg_controllen as it set it; the timestamp is read unaligned because cmsg data
    // carries no alignment promise for timespec.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let t = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                ts_ns = t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64;
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Some((n as usize, ts_ns)))
}

/// Sends signal `sig` to the child process `child` (one this process spawned and has
/// not yet reaped, so its pid cannot have been reused).
pub fn signal_child(child: &std::process::Child, sig: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(child.id())
        .map_err(|_| io::Error::other("process id out of range"))?;
    // Safety: kill has no memory effects; the pid is our own unreaped child.
    check(unsafe { libc::kill(pid, sig) })
}

/// Takes an advisory lock on `file` without waiting (flock(2); `exclusive`
/// or shared): `Ok(false)` when another open file description holds a lock
/// that excludes it. The lock goes with the last descriptor of the file,
/// also when the process is killed.
pub fn try_flock(file: &std::fs::File, exclusive: bool) -> io::Result<bool> {
    let how = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    // Safety: flock on a descriptor the caller keeps open for the call.
    let r = unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Ok(false);
    }
    Err(e)
}

/// An `ifreq` for the interface `ifname`, the rest zero: what the interface
/// ioctls of `ifaces`, `afpacket` and `linkwatch` read the name from.
pub(crate) fn ifreq(ifname: &str) -> libc::ifreq {
    // Safety: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(ifname.bytes()) {
        *dst = src as libc::c_char;
    }
    req
}

/// A netlink socket of `protocol` (`NETLINK_ROUTE`, `NETLINK_NETFILTER`, ...),
/// close-on-exec, with `flags` (e.g. `SOCK_NONBLOCK`), bound with the kernel
/// choosing its port id, and joined to the multicast `groups` (a bit mask, 0
/// for none); in the caller's network namespace, for good.
pub fn netlink_socket(
    protocol: libc::c_int,
    flags: libc::c_int,
    groups: u32,
) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // Safety: socket takes no pointers; the descriptor is owned below.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | flags,
            protocol,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // Safety: `raw` was just opened and is owned by nothing else.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
    // Safety: a zeroed sockaddr_nl is valid (family and groups set below).
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as u16;
    addr.nl_groups = groups;
    // Safety: `addr` is a live sockaddr_nl of the size given.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Receives one datagram from `fd` into `buf`, again after a signal;
/// without waiting if `dontwait` (`Ok(0)` when nothing waits). What the
/// netlink sockets of `nfqueue` and `linkwatch` read with.
pub fn recv(fd: RawFd, buf: &mut [u8], dontwait: bool) -> io::Result<usize> {
    let flags = if dontwait { libc::MSG_DONTWAIT } else { 0 };
    loop {
        // Safety: `buf` is live and writable for its length.
        let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock if dontwait => return Ok(0),
            _ => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_datagram_arrives_with_a_kernel_timestamp() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_rx_timestamps(&rx).unwrap();
        set_receive_buffer(&rx, 1 << 20).unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"hello", rx.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 64];
        let (n, ts) = recv_stamped(&rx, &mut buf).unwrap().unwrap();
        assert_eq!(&buf[..n], b"hello");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(
            ts > 0 && ts <= now && now - ts < 5_000_000_000,
            "{ts} vs {now}"
        );
        // Nothing more: the timeout gives None, not an error.
        rx.set_read_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        assert!(recv_stamped(&rx, &mut buf).unwrap().is_none());
    }

    #[test]
    fn a_child_can_be_signalled() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        signal_child(&child, libc::SIGTERM).unwrap();
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGTERM));
    }
}

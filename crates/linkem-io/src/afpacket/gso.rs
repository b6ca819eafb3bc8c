//! Sending super-frames with their offload metadata, beside the TX ring.

use super::*;

/// A send-only AF_PACKET socket without a ring that hands the kernel super-frames with
/// their offload metadata: `PACKET_VNET_HDR` on, each `sendmsg` a virtio-net header and
/// the frame (gather, no copy in user space). The kernel builds a GSO packet from the
/// header (`virtio_net_hdr_to_skb`), and the receiving host's stack handles the whole
/// super-frame once, as it would what its own GRO merged.
///
/// Why a second socket beside the TX ring's: a socket with `PACKET_TX_RING` sends only
/// from its ring (`packet_sendmsg` goes to `tpacket_snd`), whose 2 KiB slots cannot hold
/// a 64 KiB super-frame. Order with the ring: both sockets bypass the qdisc and transmit
/// in the calling thread, so frames flushed from the ring before a `send` here reach the
/// device before it.
#[derive(Debug)]
pub struct GsoSender {
    fd: RawFd,
    ifname: String,
    ifindex: u32,
    /// Super-frames the kernel took.
    pub sent: u64,
    /// `sendmsg` calls that failed transiently (ENOBUFS, EAGAIN): retried by the caller.
    pub busy: u64,
}

impl GsoSender {
    /// Opens the socket on `ifname` (protocol 0: it receives nothing).
    pub fn open(ifname: &str, qdisc_bypass: bool) -> Result<GsoSender, IoError> {
        let ifindex = index_of(ifname)?;
        // Safety: plain system call with constant arguments.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(IoError::last("socket(AF_PACKET, SOCK_RAW)", ifname));
        }
        let sock = GsoSender {
            fd,
            ifname: ifname.to_string(),
            ifindex,
            sent: 0,
            busy: 0,
        };
        let one: libc::c_int = 1;
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one)
            .map_err(|e| IoError::sys("setsockopt(PACKET_VNET_HDR)", ifname, e))?;
        if qdisc_bypass {
            setsockopt(fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &one)
                .map_err(|e| IoError::sys("setsockopt(PACKET_QDISC_BYPASS)", ifname, e))?;
        }
        // Room for a few super-frames in flight; FORCE needs CAP_NET_ADMIN.
        let _ = crate::sys::set_send_buffer(&fd, 4 << 20);
        // Safety: sockaddr_ll is plain old data; all-zero is valid.
        let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = ifindex as libc::c_int;
        // Safety: `sll` is a valid sockaddr_ll and the length passed is its size.
        let rc = unsafe {
            libc::bind(
                fd,
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(IoError::last("bind(AF_PACKET)", ifname));
        }
        Ok(sock)
    }

    /// The interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The socket, for [`super::batch_tx::BatchSender`]'s `sendmmsg`.
    pub(super) fn fd(&self) -> RawFd {
        self.fd
    }

    pub(super) fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Sends `frame` with the virtio-net header `vnet` before it. `Ok(false)` when the
    /// kernel had no room now (ENOBUFS, EAGAIN): offer it again. Any other failure
    /// (EINVAL: the kernel refused the header for this frame) is an error, and the
    /// frame was not sent.
    pub fn send(&mut self, vnet: &[u8; VNET_HDR_LEN], frame: &[u8]) -> Result<bool, IoError> {
        let iov = [
            libc::iovec {
                iov_base: vnet.as_ptr() as *mut libc::c_void,
                iov_len: VNET_HDR_LEN,
            },
            libc::iovec {
                iov_base: frame.as_ptr() as *mut libc::c_void,
                iov_len: frame.len(),
            },
        ];
        // Safety: msghdr is plain old data; all-zero is valid (no name, no control).
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = iov.len();
        // Safety: `msg` points at two iovecs over live buffers that the kernel only
        // reads during the call.
        let rc = unsafe { libc::sendmsg(self.fd, &msg, libc::MSG_DONTWAIT) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOBUFS) | Some(libc::EAGAIN) | Some(libc::EINTR) => {
                    self.busy += 1;
                    Ok(false)
                }
                _ => Err(IoError::sys("sendmsg(PACKET_VNET_HDR)", &self.ifname, e)),
            };
        }
        self.sent += 1;
        Ok(true)
    }
}

impl Drop for GsoSender {
    fn drop(&mut self) {
        // Safety: the sender owns `fd` and closes it exactly once.
        unsafe { libc::close(self.fd) };
    }
}

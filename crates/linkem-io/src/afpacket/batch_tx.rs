//! The send half of an AF_PACKET port of one of many links (`Rings::Small`):
//! frames are copied into a buffer and handed over with one `sendmmsg` per
//! flush, through the super-frame socket ([`GsoSender`], a zero
//! `virtio_net_hdr` in front of each), instead of through a TX ring.
//!
//! Why no ring: a TX ring's slot is held until the kernel frees the skb built
//! from it, and on a veth that is when the receiving host has taken the frame
//! (its backlog holds up to `netdev_max_backlog`, 1000, frames), not when the
//! flush returns. A ring small enough for an idle link to cost little (128
//! slots) then fills under a flood and the output stage waits on it: four
//! pairs flooded at once forwarded a fifth less than with 512 slots
//! (docs/numbers.md "Many links"), and 512 slots are 1 MiB resident per
//! interface, idle or not. `sendmmsg` copies each frame into an skb of its
//! own, charged to the socket's send buffer (kernel memory, only while in
//! flight), so an idle link holds nothing and a busy one as much as its
//! traffic needs. The buffer here is filled only while a link carries
//! traffic (at most [`BATCH_FRAMES`] frames).

use super::{ifreq_for, GsoSender, IoError, VNET_HDR_LEN};
use std::io;

/// Frames a flush hands over at most; a push beyond them is [`TxOutcome::NoRoom`]
/// until the next flush (the output stage flushes then). A flood leaves with one
/// call per 256 frames (64 forwarded less in docs/numbers.md "Many links"); the
/// buffer behind them is only as large as a link's traffic made it.
///
/// [`TxOutcome::NoRoom`]: linkem_core::port::TxOutcome::NoRoom
pub const BATCH_FRAMES: usize = 256;

/// Frames queued for one `sendmmsg`, and what became of those sent before.
pub struct BatchSender {
    gso: GsoSender,
    /// The queued frames back to back; `ends[i]` is where frame i ends.
    buf: Vec<u8>,
    ends: Vec<usize>,
    /// Frames dropped because the interface was down or gone when sent.
    pub link_down: u64,
    /// Flushes the kernel put off (no room in the device queue or the send
    /// buffer): the frames stay queued for the next flush.
    pub busy: u64,
}

impl BatchSender {
    pub fn new(gso: GsoSender) -> BatchSender {
        BatchSender {
            gso,
            buf: Vec::new(),
            ends: Vec::new(),
            link_down: 0,
            busy: 0,
        }
    }

    /// Queues a copy of `frame`; false when [`BATCH_FRAMES`] wait already.
    pub fn push(&mut self, frame: &[u8]) -> bool {
        if self.ends.len() >= BATCH_FRAMES {
            return false;
        }
        self.buf.extend_from_slice(frame);
        self.ends.push(self.buf.len());
        true
    }

    /// Frames queued and not yet handed to the kernel.
    pub fn queued(&self) -> usize {
        self.ends.len()
    }

    /// Hands every queued frame to the kernel with one `sendmmsg`. The kernel
    /// putting some off (ENOBUFS, EAGAIN) leaves them queued, counted in
    /// [`BatchSender::busy`]; an interface down or gone drops them, counted in
    /// [`BatchSender::link_down`] (as a TX ring's flush does, so the sender
    /// never waits for an interface that may not come back).
    pub fn flush(&mut self) -> Result<(), IoError> {
        while !self.ends.is_empty() {
            let sent = match self.send_queued() {
                Ok(n) => n,
                Err(e) => match e.raw_os_error() {
                    Some(libc::ENOBUFS) | Some(libc::EAGAIN) | Some(libc::EINTR) => {
                        self.busy += 1;
                        return Ok(());
                    }
                    Some(code) if super::link_down_errno(code) => {
                        self.link_down += self.ends.len() as u64;
                        self.ends.clear();
                        self.buf.clear();
                        return Ok(());
                    }
                    _ => return Err(IoError::sys("sendmmsg(AF_PACKET)", self.gso.ifname(), e)),
                },
            };
            self.gso.sent += sent as u64;
            let consumed = self.ends[sent - 1];
            self.buf.drain(..consumed);
            self.ends.drain(..sent);
            for end in &mut self.ends {
                *end -= consumed;
            }
        }
        Ok(())
    }

    /// One `sendmmsg` of the queued frames: how many the kernel took (at
    /// least one), or the error of the first.
    fn send_queued(&mut self) -> io::Result<usize> {
        static ZERO_VNET: [u8; VNET_HDR_LEN] = [0; VNET_HDR_LEN];
        let n = self.ends.len();
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 2 * BATCH_FRAMES];
        // Safety: an all-zero mmsghdr is a valid empty message.
        let mut msgs: [libc::mmsghdr; BATCH_FRAMES] = unsafe { std::mem::zeroed() };
        let mut start = 0;
        for i in 0..n {
            iov[2 * i] = libc::iovec {
                iov_base: ZERO_VNET.as_ptr() as *mut libc::c_void,
                iov_len: VNET_HDR_LEN,
            };
            iov[2 * i + 1] = libc::iovec {
                // Safety: start..ends[i] lies inside buf.
                iov_base: unsafe { self.buf.as_mut_ptr().add(start) }.cast(),
                iov_len: self.ends[i] - start,
            };
            start = self.ends[i];
        }
        for (i, m) in msgs.iter_mut().enumerate().take(n) {
            // Safety: iov outlives the call; 2 * i + 1 < 2 * BATCH_FRAMES.
            m.msg_hdr.msg_iov = unsafe { iov.as_mut_ptr().add(2 * i) };
            m.msg_hdr.msg_iovlen = 2;
        }
        // Safety: msgs[..n] each point at two valid iovecs over live buffers;
        // the socket is bound to its interface, so no address is needed.
        let rc = unsafe {
            libc::sendmmsg(
                self.gso.fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        if rc == 0 {
            return Err(io::Error::from_raw_os_error(libc::EAGAIN));
        }
        Ok(rc as usize)
    }

    /// The super-frame socket, for a super-frame sent after the queued frames.
    pub fn gso(&mut self) -> &mut GsoSender {
        &mut self.gso
    }

    /// The interface's MTU as it is now (`SIOCGIFMTU`), None if it cannot be read.
    pub fn read_mtu(&self) -> Option<u32> {
        let mut ifr = ifreq_for(self.gso.ifname());
        // Safety: SIOCGIFMTU reads the name and writes the MTU inside `ifr`, a valid ifreq.
        if unsafe { libc::ioctl(self.gso.fd(), libc::SIOCGIFMTU, &mut ifr) } != 0 {
            return None;
        }
        // Safety: SIOCGIFMTU filled the `ifru_mtu` member of the union.
        let mtu = unsafe { ifr.ifr_ifru.ifru_mtu };
        u32::try_from(mtu).ok().filter(|&m| m > 0)
    }
}

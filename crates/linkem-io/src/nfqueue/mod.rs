//! A netfilter queue (NFQUEUE) over a raw `NETLINK_NETFILTER` socket: the
//! packets of this host's own sockets that an iptables rule hands to
//! userspace (`-j NFQUEUE --queue-num N --queue-bypass`), each held by the
//! kernel until linkem gives its verdict by packet id.
//!
//! Why hand-written rather than the `nfq` crate (0.2.5, the registry's
//! maintained binding): its `Queue` takes `&mut self` for both `recv` and
//! `verdict`, and a verdict needs the received `Message`, which pins the whole
//! receive buffer it came in. linkem receives on the live stage's thread and
//! gives verdicts from the output stages' threads at each packet's release
//! time, tens of milliseconds later, out of order: with `nfq` every verdict
//! would take a lock shared with the receiver, and every held packet would
//! keep a 64 KiB receive buffer alive. Here the socket is shared ([`Arc`]) by
//! one receiver and any number of verdict senders (the kernel accepts
//! verdicts from any thread of the bound socket), a verdict needs only the
//! id, and a batch of verdicts is one `send` (one netlink datagram holding
//! several messages, which nfnetlink processes in turn).
//!
//! Configuration (each request acknowledged, so a refusal is an error here):
//! bind the queue, copy whole packets (up to 65535 bytes), `NFQA_CFG_F_FAIL_OPEN`
//! (a full queue accepts instead of dropping) and `NFQA_CFG_F_UID_GID` (the
//! owner of the local socket, where the kernel knows it). `NFQA_CFG_F_GSO` is
//! left off on purpose: the kernel then segments a GSO packet before queueing
//! it and finishes any checksum left to the hardware, so linkem sees wire-sized
//! packets with valid checksums (corruption stays detectable by the receiver)
//! and rate, loss and queue limits apply per wire packet, as on the bridge.
//!
//! [`parse_packets`] reads received datagrams with bounds-checked slices only
//! (no input can make it panic: fuzz target `nfqueue`).

pub mod port;

/// What binding a queue and sending from raw sockets need.
pub const NEEDED_CAPS: &[crate::caps::Cap] =
    &[crate::caps::Cap::NET_ADMIN, crate::caps::Cap::NET_RAW];

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

const NETLINK_NETFILTER: i32 = 12;
const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLMSG_HDRLEN: usize = 16;
const NFGEN_HDRLEN: usize = 4;

const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_PACKET: u8 = 2;
const NFQA_CFG_F_FAIL_OPEN: u32 = 1;
const NFQA_CFG_F_UID_GID: u32 = 8;

const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_MARK: u16 = 3;
const NFQA_TIMESTAMP: u16 = 4;
const NFQA_IFINDEX_INDEV: u16 = 5;
const NFQA_IFINDEX_OUTDEV: u16 = 6;
const NFQA_PAYLOAD: u16 = 10;
const NFQA_UID: u16 = 16;
const NFQA_GID: u16 = 17;

/// Largest packet the kernel copies to us (the queue's copy range).
pub const MAX_PACKET_BYTES: usize = 65535;
/// A receive buffer that holds any one queued packet with its attributes.
pub const RECV_BUFFER_BYTES: usize = MAX_PACKET_BYTES + 8192;

/// What to do with a queued packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// NF_DROP: the packet is freed.
    Drop,
    /// NF_ACCEPT: the packet goes on through the stack.
    Accept,
}

/// One packet the kernel queued, as read from a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedPacket<'a> {
    /// The id a verdict names.
    pub id: u32,
    /// The netfilter hook it was taken at (1 LOCAL_IN, 3 LOCAL_OUT, ...).
    pub hook: u8,
    /// EtherType of the packet (0x0800 IPv4, 0x86dd IPv6).
    pub hw_protocol: u16,
    /// The IP packet (from the IP header on), as far as copied.
    pub payload: &'a [u8],
    /// Receive time in CLOCK_REALTIME ns when the kernel stamped the packet
    /// (received packets only; 0 when absent).
    pub ts_ns: u64,
    /// Interface it came in on / goes out of (0 when absent).
    pub in_ifindex: u32,
    /// Interface it goes out of (0 when absent).
    pub out_ifindex: u32,
    /// Owner of the local socket (`NFQA_UID`, `NFQA_GID`), when known.
    pub uid: Option<u32>,
    /// The socket's group, when known.
    pub gid: Option<u32>,
    /// The packet's firewall mark (`NFQA_MARK`; 0 when absent: the kernel
    /// sends it only when set).
    pub mark: u32,
}

/// Why a datagram could not be read as queued packets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NfqError {
    /// The kernel answered a request with an error.
    #[error("netfilter queue: the kernel refused a request: {0}")]
    Refused(String),
    /// A message is shorter than its header says, or an attribute overruns.
    #[error("netfilter queue: malformed message at byte {0}")]
    Malformed(usize),
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn ne16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn ne32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Reads every netlink message of one received datagram: each queued packet
/// is given to `f`; an error message (an answer to a request, or to a verdict
/// the kernel refused) is returned as [`NfqError::Refused`] after the packets
/// before it; other messages are skipped. Returns how many packets were read.
pub fn parse_packets(buf: &[u8], f: &mut dyn FnMut(QueuedPacket<'_>)) -> Result<usize, NfqError> {
    let mut at = 0usize;
    let mut n = 0;
    while at + NLMSG_HDRLEN <= buf.len() {
        let len = ne32(buf, at).ok_or(NfqError::Malformed(at))? as usize;
        let kind = ne16(buf, at + 4).ok_or(NfqError::Malformed(at))?;
        if len < NLMSG_HDRLEN || at + len > buf.len() {
            return Err(NfqError::Malformed(at));
        }
        let msg = &buf[at..at + len];
        if kind == NLMSG_ERROR {
            let errno = ne32(msg, NLMSG_HDRLEN).ok_or(NfqError::Malformed(at))? as i32;
            if errno != 0 {
                return Err(NfqError::Refused(
                    // An error message carries -errno; i32::MIN has no
                    // negation and is no errno (found by the nfqueue fuzz target).
                    io::Error::from_raw_os_error(
                        errno.checked_neg().ok_or(NfqError::Malformed(at))?,
                    )
                    .to_string(),
                ));
            }
        } else if kind == (NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_PACKET) {
            let p = parse_packet(msg).ok_or(NfqError::Malformed(at))?;
            f(p);
            n += 1;
        }
        at += align4(len);
    }
    Ok(n)
}

/// One NFQNL_MSG_PACKET message (netlink header included); `None` if it has
/// no packet header or an attribute overruns.
fn parse_packet(msg: &[u8]) -> Option<QueuedPacket<'_>> {
    let mut p = QueuedPacket {
        id: 0,
        hook: 0,
        hw_protocol: 0,
        payload: &[],
        ts_ns: 0,
        in_ifindex: 0,
        out_ifindex: 0,
        uid: None,
        gid: None,
        mark: 0,
    };
    let mut has_hdr = false;
    let mut at = NLMSG_HDRLEN + NFGEN_HDRLEN;
    while at + 4 <= msg.len() {
        let len = ne16(msg, at)? as usize;
        // The nested and byte-order flags are not part of the type.
        let kind = ne16(msg, at + 2)? & 0x3fff;
        if len < 4 || at + len > msg.len() {
            return None;
        }
        let v = &msg[at + 4..at + len];
        match kind {
            NFQA_PACKET_HDR => {
                p.id = be32(v, 0)?;
                p.hw_protocol = be16(v, 4)?;
                p.hook = *v.get(6)?;
                has_hdr = true;
            }
            NFQA_TIMESTAMP => {
                let (s, us) = (be64(v, 0)?, be64(v, 8)?);
                p.ts_ns = s
                    .saturating_mul(1_000_000_000)
                    .saturating_add(us.saturating_mul(1000));
            }
            NFQA_IFINDEX_INDEV => p.in_ifindex = be32(v, 0)?,
            NFQA_IFINDEX_OUTDEV => p.out_ifindex = be32(v, 0)?,
            NFQA_PAYLOAD => p.payload = v,
            NFQA_UID => p.uid = Some(be32(v, 0)?),
            NFQA_GID => p.gid = Some(be32(v, 0)?),
            NFQA_MARK => p.mark = be32(v, 0)?,
            _ => {}
        }
        at += align4(len);
    }
    has_hdr.then_some(p)
}

/// Builds netlink messages in a reusable buffer.
struct MsgBuf {
    buf: Vec<u8>,
    start: usize,
}

impl MsgBuf {
    fn new() -> Self {
        MsgBuf {
            buf: Vec::with_capacity(4096),
            start: 0,
        }
    }

    /// Starts a message of the queue subsystem for queue `queue_num`.
    fn begin(&mut self, msg: u16, flags: u16, queue_num: u16) {
        self.start = self.buf.len();
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // length, set by end()
        self.buf
            .extend_from_slice(&(NFNL_SUBSYS_QUEUE << 8 | msg).to_ne_bytes());
        self.buf
            .extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // sequence
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
        self.buf.push(libc::AF_UNSPEC as u8);
        self.buf.push(0); // NFNETLINK_V0
        self.buf.extend_from_slice(&queue_num.to_be_bytes());
    }

    fn attr(&mut self, kind: u16, value: &[u8]) {
        let len = 4 + value.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value);
        self.buf.resize(align4(self.buf.len()), 0);
    }

    fn end(&mut self) {
        let len = (self.buf.len() - self.start) as u32;
        self.buf[self.start..self.start + 4].copy_from_slice(&len.to_ne_bytes());
    }
}

/// A bound netfilter queue: one socket, shared by the receiver and the
/// verdict senders.
#[derive(Clone)]
pub struct NfQueue {
    fd: Arc<OwnedFd>,
    queue_num: u16,
}

impl NfQueue {
    /// Opens a netlink socket and binds queue `queue_num` to it, copying whole
    /// packets, failing open when full, with socket owners; `max_len`: packets
    /// the kernel keeps waiting for us (beyond that they pass unimpaired).
    pub fn open(queue_num: u16, max_len: u32) -> io::Result<NfQueue> {
        let fd = crate::sys::netlink_socket(NETLINK_NETFILTER, 0, 0)?;
        // Packets arrive in bursts while linkem holds others: a large receive
        // buffer keeps the kernel from dropping our copies (ENOBUFS); the
        // queue itself fails open. Best effort (SO_RCVBUFFORCE needs
        // CAP_NET_ADMIN, which host mode has).
        crate::sys::set_int_option(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 16 << 20).ok();
        // A copy the kernel could not deliver to a full socket is accepted
        // unimpaired (fail open); recv need not report ENOBUFS for it.
        crate::sys::set_int_option(&fd, libc::SOL_NETLINK, libc::NETLINK_NO_ENOBUFS, 1).ok();
        let q = NfQueue {
            fd: Arc::new(fd),
            queue_num,
        };
        let mut m = MsgBuf::new();
        m.begin(NFQNL_MSG_CONFIG, NLM_F_ACK, queue_num);
        m.attr(NFQA_CFG_CMD, &[NFQNL_CFG_CMD_BIND, 0, 0, 0]);
        m.end();
        q.request(&m.buf)
            .map_err(|e| io::Error::other(format!("binding netfilter queue {queue_num}: {e}")))?;
        let mut m = MsgBuf::new();
        m.begin(NFQNL_MSG_CONFIG, NLM_F_ACK, queue_num);
        let mut params = (MAX_PACKET_BYTES as u32).to_be_bytes().to_vec();
        params.push(NFQNL_COPY_PACKET);
        m.attr(NFQA_CFG_PARAMS, &params);
        m.attr(NFQA_CFG_QUEUE_MAXLEN, &max_len.to_be_bytes());
        let flags = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_UID_GID;
        m.attr(NFQA_CFG_FLAGS, &flags.to_be_bytes());
        m.attr(NFQA_CFG_MASK, &flags.to_be_bytes());
        m.end();
        q.request(&m.buf).map_err(|e| {
            io::Error::other(format!("configuring netfilter queue {queue_num}: {e}"))
        })?;
        Ok(q)
    }

    /// The queue number bound.
    pub fn queue_num(&self) -> u16 {
        self.queue_num
    }

    /// The socket, to poll for POLLIN.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Sends one acknowledged request and waits for its answer (packets
    /// arriving meanwhile cannot: the queue is bound by the first request).
    fn request(&self, msg: &[u8]) -> io::Result<()> {
        self.send(msg)?;
        let mut buf = vec![0u8; 8192];
        loop {
            let n = self.recv(&mut buf, false)?;
            let mut ack = None;
            let mut at = 0;
            while at + NLMSG_HDRLEN <= n {
                let len = ne32(&buf, at).unwrap_or(0) as usize;
                if ne16(&buf, at + 4) == Some(NLMSG_ERROR) {
                    ack = Some(ne32(&buf, at + NLMSG_HDRLEN).unwrap_or(0) as i32);
                }
                if len < NLMSG_HDRLEN {
                    break;
                }
                at += align4(len);
            }
            match ack {
                Some(0) => return Ok(()),
                Some(e) => return Err(io::Error::from_raw_os_error(-e)),
                None => continue,
            }
        }
    }

    fn send(&self, msg: &[u8]) -> io::Result<()> {
        // Safety: a zeroed sockaddr_nl is valid; pid 0 is the kernel.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        loop {
            // Safety: `msg` and `addr` are live for the call, of the sizes given.
            let r = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    msg.as_ptr().cast(),
                    msg.len(),
                    0,
                    (&addr as *const libc::sockaddr_nl).cast(),
                    std::mem::size_of::<libc::sockaddr_nl>() as u32,
                )
            };
            if r >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Waits until a packet may be ready or `timeout_ns` has passed.
    pub fn wait(&self, timeout_ns: u64) -> io::Result<()> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout_ns.div_ceil(1_000_000).min(i32::MAX as u64) as i32;
        // Safety: one live pollfd, count 1; EINTR is a wake-up like any other.
        unsafe { libc::poll(&mut pfd, 1, ms) };
        Ok(())
    }

    /// Receives one datagram into `buf` (non-blocking if `dontwait`: `Ok(0)`
    /// when nothing waits).
    pub fn recv(&self, buf: &mut [u8], dontwait: bool) -> io::Result<usize> {
        crate::sys::recv(self.fd.as_raw_fd(), buf, dontwait)
    }
}

/// Verdicts gathered for one `send`.
pub struct Verdicts {
    queue: NfQueue,
    msg: MsgBuf,
    pending: usize,
}

impl Verdicts {
    /// An empty batch for `queue`.
    pub fn new(queue: NfQueue) -> Self {
        Verdicts {
            queue,
            msg: MsgBuf::new(),
            pending: 0,
        }
    }

    /// Adds the verdict for packet `id`; `payload`: the packet as it must go
    /// on (replacing the queued one: a CE mark, corrupted bits), if changed.
    pub fn push(&mut self, id: u32, verdict: Verdict, payload: Option<&[u8]>) {
        let v: u32 = match verdict {
            Verdict::Drop => 0,
            Verdict::Accept => 1,
        };
        let mut hdr = [0u8; 8];
        hdr[..4].copy_from_slice(&v.to_be_bytes());
        hdr[4..].copy_from_slice(&id.to_be_bytes());
        let queue_num = self.queue.queue_num;
        self.msg.begin(NFQNL_MSG_VERDICT, 0, queue_num);
        self.msg.attr(NFQA_VERDICT_HDR, &hdr);
        if let Some(p) = payload {
            self.msg.attr(NFQA_PAYLOAD, p);
        }
        self.msg.end();
        self.pending += 1;
    }

    /// Verdicts waiting for [`Verdicts::flush`].
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Bytes waiting: a caller flushes before a datagram grows past what the
    /// kernel takes in one message.
    pub fn pending_bytes(&self) -> usize {
        self.msg.buf.len()
    }

    /// Sends the verdicts gathered, in one datagram.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.pending == 0 {
            return Ok(());
        }
        let r = self.queue.send(&self.msg.buf);
        self.msg.buf.clear();
        self.pending = 0;
        r
    }
}

/// Raw IP sockets that send packets linkem took from the stack and dropped
/// there (`linkem host` on what this host sends: a packet the kernel no
/// longer holds no longer counts against its socket's send budget). Each
/// socket carries `mark` (SO_MARK), so that linkem's own chain lets what it
/// sends through instead of queueing it again.
pub struct RawSender {
    v4: OwnedFd,
    v6: OwnedFd,
}

fn raw_socket(family: i32, mark: u32) -> io::Result<OwnedFd> {
    // Safety: socket takes no pointers; the descriptor is owned below.
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::IPPROTO_RAW,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // Safety: `fd` was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    crate::sys::set_int_option(&fd, libc::SOL_SOCKET, libc::SO_MARK, mark as i32)?;
    if family == libc::AF_INET6 {
        // IPPROTO_RAW on IPv6 implies IPV6_HDRINCL since Linux 4.5; asked
        // for anyway, where the option exists.
        let _ = crate::sys::set_int_option(&fd, libc::IPPROTO_IPV6, 36 /* IPV6_HDRINCL */, 1);
    }
    Ok(fd)
}

impl RawSender {
    /// Opens one IPv4 and one IPv6 raw socket marked `mark` (needs
    /// CAP_NET_RAW and CAP_NET_ADMIN).
    pub fn open(mark: u32) -> io::Result<RawSender> {
        Ok(RawSender {
            v4: raw_socket(libc::AF_INET, mark)?,
            v6: raw_socket(libc::AF_INET6, mark)?,
        })
    }

    /// Sends one IP packet (IPv4 or IPv6, from its header on) as it is, to
    /// its destination address.
    pub fn send(&self, packet: &[u8]) -> io::Result<()> {
        let bad = || io::Error::new(io::ErrorKind::InvalidData, "not an IP packet");
        let r = match packet.first().map(|b| b >> 4) {
            Some(4) => {
                let dst: [u8; 4] = packet
                    .get(16..20)
                    .ok_or_else(bad)?
                    .try_into()
                    .map_err(|_| bad())?;
                // Safety: a zeroed sockaddr_in is valid; fields set below.
                let mut a: libc::sockaddr_in = unsafe { std::mem::zeroed() };
                a.sin_family = libc::AF_INET as u16;
                a.sin_addr.s_addr = u32::from_ne_bytes(dst);
                // Safety: `packet` and `a` are live for the call, of the sizes given.
                unsafe {
                    libc::sendto(
                        self.v4.as_raw_fd(),
                        packet.as_ptr().cast(),
                        packet.len(),
                        0,
                        (&a as *const libc::sockaddr_in).cast(),
                        std::mem::size_of::<libc::sockaddr_in>() as u32,
                    )
                }
            }
            Some(6) => {
                let dst: [u8; 16] = packet
                    .get(24..40)
                    .ok_or_else(bad)?
                    .try_into()
                    .map_err(|_| bad())?;
                // Safety: a zeroed sockaddr_in6 is valid; fields set below.
                let mut a: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
                a.sin6_family = libc::AF_INET6 as u16;
                a.sin6_addr.s6_addr = dst;
                // Safety: `packet` and `a` are live for the call, of the sizes given.
                unsafe {
                    libc::sendto(
                        self.v6.as_raw_fd(),
                        packet.as_ptr().cast(),
                        packet.len(),
                        0,
                        (&a as *const libc::sockaddr_in6).cast(),
                        std::mem::size_of::<libc::sockaddr_in6>() as u32,
                    )
                }
            }
            _ => return Err(bad()),
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet_msg(id: u32, payload: &[u8], uid: Option<u32>) -> Vec<u8> {
        let mut m = MsgBuf::new();
        m.begin(NFQNL_MSG_PACKET, 0, 0);
        let mut hdr = id.to_be_bytes().to_vec();
        hdr.extend_from_slice(&0x0800u16.to_be_bytes());
        hdr.push(3);
        m.attr(NFQA_PACKET_HDR, &hdr);
        m.attr(NFQA_PAYLOAD, payload);
        if let Some(u) = uid {
            m.attr(NFQA_UID, &u.to_be_bytes());
            m.attr(NFQA_GID, &(u + 1).to_be_bytes());
            m.attr(NFQA_MARK, &(u + 2).to_be_bytes());
        }
        m.end();
        m.buf
    }

    #[test]
    fn packets_of_one_datagram_are_read_in_order() {
        let mut buf = packet_msg(7, b"\x45abc", Some(1001));
        buf.extend(packet_msg(8, b"\x60", None));
        let mut got = Vec::new();
        let n = parse_packets(&buf, &mut |p| {
            got.push((p.id, p.payload.to_vec(), p.uid, p.gid, p.hook, p.mark))
        })
        .unwrap();
        assert_eq!(n, 2);
        assert_eq!(
            got,
            vec![
                (7, b"\x45abc".to_vec(), Some(1001), Some(1002), 3, 1003),
                (8, b"\x60".to_vec(), None, None, 3, 0)
            ]
        );
    }

    #[test]
    fn an_error_message_with_no_errno_is_malformed_not_a_panic() {
        // nlmsghdr (len 20, type NLMSG_ERROR) then an error of i32::MIN.
        let mut buf = Vec::new();
        buf.extend_from_slice(&20u32.to_ne_bytes());
        buf.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        buf.extend_from_slice(&[0u8; 10]);
        buf.extend_from_slice(&i32::MIN.to_ne_bytes());
        assert!(matches!(
            parse_packets(&buf, &mut |_| {}),
            Err(NfqError::Malformed(0))
        ));
    }

    #[test]
    fn truncated_and_overrunning_messages_are_errors() {
        let buf = packet_msg(7, b"\x45abc", None);
        for cut in [NLMSG_HDRLEN + 1, buf.len() - 1] {
            assert_eq!(
                parse_packets(&buf[..cut], &mut |_| {}),
                Err(NfqError::Malformed(0))
            );
        }
        let mut bad = buf.clone();
        // An attribute claiming more bytes than the message holds.
        bad[NLMSG_HDRLEN + NFGEN_HDRLEN] = 0xff;
        assert_eq!(
            parse_packets(&bad, &mut |_| {}),
            Err(NfqError::Malformed(0))
        );
    }

    #[test]
    fn an_error_answer_is_reported() {
        let mut buf = vec![0u8; NLMSG_HDRLEN + 4];
        let len = buf.len() as u32;
        buf[..4].copy_from_slice(&len.to_ne_bytes());
        buf[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        buf[NLMSG_HDRLEN..].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        assert!(matches!(
            parse_packets(&buf, &mut |_| {}),
            Err(NfqError::Refused(_))
        ));
    }
}

//! A netfilter queue as the live stage's ports (`linkem host`): each queued packet
//! becomes a frame (a made-up Ethernet header carrying its id, then the IP packet), and a
//! released frame becomes its verdict, or, for a packet stolen when read, a copy sent
//! through a raw socket.

use super::{parse_packets, NfQueue, NfqError, RawSender, Verdict, Verdicts};
use super::{MAX_PACKET_BYTES, RECV_BUFFER_BYTES};
use linkem_core::port::{HeldBound, RxFrame, RxPort, TxOutcome, TxPort, WaitFds};
use linkem_core::rules::SocketOwner;
use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The ports of a pair of queues (side a: what this host receives; side b: what it
/// sends).
pub struct QueuePorts {
    /// Receive halves: side a, side b.
    pub rx: [Box<dyn RxPort>; 2],
    /// Verdict halves: direction a->b (side a's queue), b->a.
    pub tx: [Box<dyn TxPort>; 2],
}

/// The ports of `queues` (side a's, side b's). Side b steals its packets and sends
/// their copies through `raw` (see `QueueRx`); each verdict half keeps at most
/// `held.packets` records of a pipe in `held.pipes` waiting.
pub fn ports(queues: [NfQueue; 2], raw: RawSender, held: HeldBound) -> QueuePorts {
    let ids = HeldIds::default();
    let rx: [Box<dyn RxPort>; 2] = [
        Box::new(QueueRx::new(queues[0].clone(), None)),
        Box::new(QueueRx::new(queues[1].clone(), Some(ids.clone()))),
    ];
    let [qa, qb] = queues;
    let tx: [Box<dyn TxPort>; 2] = [
        Box::new(QueueTx::new(qa, None, held.clone())),
        Box::new(QueueTx::new(qb, Some((raw, ids)), held)),
    ];
    QueuePorts { rx, tx }
}

/// Length of the header linkem puts before each IP packet.
pub const HEADER_BYTES: usize = 14;
/// Verdict bytes gathered before a send (well within a netlink socket's
/// default send buffer).
const VERDICT_BATCH_BYTES: usize = 128 << 10;

/// The made-up Ethernet header before a queued packet: the id three times,
/// then the EtherType.
fn header(id: u32, hw_protocol: u16, payload: &[u8]) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    for i in 0..3 {
        h[i * 4..i * 4 + 4].copy_from_slice(&id.to_be_bytes());
    }
    let ether_type = match (hw_protocol, payload.first().map(|b| b >> 4)) {
        (0x0800 | 0x86dd, _) => hw_protocol,
        (_, Some(6)) => 0x86dd,
        _ => 0x0800,
    };
    h[12..].copy_from_slice(&ether_type.to_be_bytes());
    h
}

/// The packet id a frame's header carries, by a majority of its three
/// copies byte by byte; `None` when a byte has no majority.
pub fn frame_id(frame: &[u8]) -> Option<u32> {
    let h = frame.get(..12)?;
    let mut id = [0u8; 4];
    for (i, b) in id.iter_mut().enumerate() {
        let (x, y, z) = (h[i], h[4 + i], h[8 + i]);
        *b = if x == y || x == z {
            x
        } else if y == z {
            y
        } else {
            return None;
        };
    }
    Some(u32::from_be_bytes(id))
}

/// Why side b holds a sent packet (a verdict at its release time, as side a)
/// instead of stealing it (NF_DROP now, its copy sent through the raw socket
/// at release): the raw socket would change or refuse it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// It carries a firewall mark: a re-send would carry the raw socket's mark (`linkem host`'s `OWN_MARK`) instead,
    /// and mark-based routing (`ip rule fwmark`, `wg-quick`, `ping -m`)
    /// would send it elsewhere.
    Marked,
    /// Larger than its interface's MTU: the OUTPUT hook sees a datagram
    /// before the kernel fragments it, and a raw socket refuses one beyond
    /// the MTU (EMSGSIZE), while an accepted packet is fragmented as usual.
    OverMtu,
    /// To an IPv6 link-local or multicast address: a raw socket's
    /// destination has no scope (interface) to name.
    Scoped,
}

/// Whether side b must hold `payload` (an IP packet) with firewall mark
/// `mark`, going out of an interface of MTU `mtu_bytes` (`None`: unknown,
/// then anything beyond IPv6's minimum of 1280 bytes is held).
pub fn must_hold(payload: &[u8], mark: u32, mtu_bytes: Option<u32>) -> Option<Hold> {
    if mark != 0 {
        return Some(Hold::Marked);
    }
    if payload.len() > mtu_bytes.unwrap_or(1280) as usize {
        return Some(Hold::OverMtu);
    }
    let v6_dst = (payload.first().map(|b| b >> 4) == Some(6))
        .then(|| payload.get(24..26))
        .flatten();
    if let Some(d) = v6_dst {
        // fe80::/10 link-local, ff00::/8 multicast.
        if d[0] == 0xff || (d[0] == 0xfe && d[1] & 0xc0 == 0x80) {
            return Some(Hold::Scoped);
        }
    }
    None
}

/// The ids of side b's held packets, shared by its receive half (which
/// adds one) and its verdict half (which takes it out at release or drop):
/// a held packet needs a verdict, a stolen one a re-send. Only held packets
/// take the lock (the count is read first).
#[derive(Clone, Default)]
struct HeldIds {
    count: Arc<AtomicUsize>,
    ids: Arc<Mutex<HashSet<u32>>>,
}

impl HeldIds {
    fn insert(&self, id: u32) {
        let mut ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        if ids.insert(id) {
            self.count.fetch_add(1, Ordering::Release);
        }
    }

    /// Whether `id` was held (and is no longer).
    fn take(&self, id: u32) -> bool {
        if self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        let was = ids.remove(&id);
        if was {
            self.count.fetch_sub(1, Ordering::Release);
        }
        was
    }
}

/// MTUs by interface index, each read again after [`MTU_TTL`] (an MTU may
/// change under a running linkem).
struct MtuCache {
    by_index: HashMap<u32, (Option<u32>, Instant)>,
}

const MTU_TTL: Duration = Duration::from_secs(1);

impl MtuCache {
    fn mtu_bytes(&mut self, index: u32) -> Option<u32> {
        if index == 0 {
            return None;
        }
        let now = Instant::now();
        match self.by_index.get(&index) {
            Some(&(mtu, at)) if now.duration_since(at) < MTU_TTL => mtu,
            _ => {
                let mtu = crate::ifaces::mtu_of_index(index).ok();
                self.by_index.insert(index, (mtu, now));
                mtu
            }
        }
    }
}

/// A queue's receive half: packets as frames (made-up header + IP packet).
///
/// `steal` (side b, what this host sends): each packet gets NF_DROP as soon
/// as it is read, so the kernel frees it and it stops counting against its
/// socket (TCP small queues, a socket's send buffer); at its release time
/// linkem sends its copy through a raw socket ([`QueueTx`]). A packet the raw
/// socket would change or refuse ([`must_hold`]) is held instead, its id
/// kept in the shared [`HeldIds`].
struct QueueRx {
    queue: NfQueue,
    buf: Vec<u8>,
    frame: Vec<u8>,
    drops: Verdicts,
    steal: Option<(HeldIds, MtuCache)>,
}

impl QueueRx {
    fn new(queue: NfQueue, steal: Option<HeldIds>) -> Self {
        QueueRx {
            drops: Verdicts::new(queue.clone()),
            steal: steal.map(|h| {
                (
                    h,
                    MtuCache {
                        by_index: HashMap::new(),
                    },
                )
            }),
            queue,
            buf: vec![0u8; RECV_BUFFER_BYTES],
            frame: Vec::with_capacity(HEADER_BYTES + MAX_PACKET_BYTES),
        }
    }

    fn flush_drops(&mut self) -> io::Result<()> {
        self.drops.flush()
    }
}

impl RxPort for QueueRx {
    fn rx_batch(&mut self, max: usize, f: &mut dyn FnMut(RxFrame<'_>)) -> io::Result<usize> {
        self.flush_drops()?;
        let mut n = 0;
        while n < max {
            let len = self.queue.recv(&mut self.buf, true)?;
            if len == 0 {
                break;
            }
            let frame = &mut self.frame;
            let (steal, drops) = (&mut self.steal, &mut self.drops);
            let got = parse_packets(&self.buf[..len], &mut |p| {
                if let Some((held, mtus)) = steal {
                    let mtu = mtus.mtu_bytes(p.out_ifindex);
                    if must_hold(p.payload, p.mark, mtu).is_some() {
                        held.insert(p.id);
                    } else {
                        drops.push(p.id, Verdict::Drop, None);
                    }
                }
                frame.clear();
                frame.extend_from_slice(&header(p.id, p.hw_protocol, p.payload));
                frame.extend_from_slice(p.payload);
                let owner = p.uid.map(|uid| SocketOwner {
                    uid,
                    gid: p.gid.unwrap_or(u32::MAX),
                });
                f(RxFrame {
                    data: frame,
                    orig_len: frame.len() as u32,
                    ts_ns: 0,
                    offload: Default::default(),
                    owner,
                });
            });
            match got {
                Ok(k) => n += k,
                // A refused verdict (an id no longer queued) is answered on
                // this socket; it costs that packet, not the run.
                Err(NfqError::Refused(_)) => {}
                Err(e) => return Err(io::Error::other(e.to_string())),
            }
        }
        Ok(n)
    }

    fn wait_rx(&mut self, timeout_ns: u64) -> io::Result<()> {
        self.flush_drops()?;
        self.queue.wait(timeout_ns)
    }

    fn wait_fds(&mut self, fds: &mut Vec<RawFd>) -> io::Result<WaitFds> {
        self.flush_drops()?;
        fds.push(self.queue.raw_fd());
        Ok(WaitFds::Added)
    }

    fn wants_discards(&self) -> bool {
        true
    }

    fn discard(&mut self, frame: &[u8]) {
        let Some(id) = frame_id(frame) else { return };
        match &self.steal {
            // A stolen packet was dropped in the kernel when read.
            Some((held, _)) if !held.take(id) => {}
            _ => self.drops.push(id, Verdict::Drop, None),
        }
    }
}

/// A queue's verdict half: a released frame's id gets NF_ACCEPT with the
/// packet as the model left it; with `raw` (side b) a stolen packet is sent
/// through the raw socket instead, a held one (in [`HeldIds`]) gets its
/// verdict as on side a.
struct QueueTx {
    verdicts: Verdicts,
    raw: Option<(RawSender, HeldIds)>,
    errors: u64,
    held: HeldBound,
}

impl QueueTx {
    fn new(queue: NfQueue, raw: Option<(RawSender, HeldIds)>, held: HeldBound) -> Self {
        QueueTx {
            verdicts: Verdicts::new(queue),
            raw,
            errors: 0,
            held,
        }
    }
}

/// Why host mode cannot duplicate: what `'duplicate' is not available`
/// goes on with, at start-up and for a change asked while running.
pub const NO_COPIES: &str = "in host mode: the kernel holds each queued packet \
    under one id and takes one verdict for it, so linkem has no second copy to give back";

impl TxPort for QueueTx {
    fn tx_push(&mut self, frame: &[u8]) -> TxOutcome {
        let id = frame_id(frame);
        if self.verdicts.pending() > 0
            && self.verdicts.pending_bytes() + frame.len() > VERDICT_BATCH_BYTES
        {
            return TxOutcome::NoRoom;
        }
        if let Some((raw, held)) = &self.raw {
            if !id.is_some_and(|id| held.take(id)) {
                let sent = frame.get(HEADER_BYTES..).map(|p| raw.send(p));
                if !matches!(sent, Some(Ok(()))) {
                    self.errors += 1;
                }
                return TxOutcome::Queued;
            }
        }
        match id {
            Some(id) => self
                .verdicts
                .push(id, Verdict::Accept, frame.get(HEADER_BYTES..)),
            None => self.errors += 1,
        }
        TxOutcome::Queued
    }

    fn tx_flush(&mut self) -> io::Result<()> {
        self.verdicts.flush()
    }

    fn tx_errors(&mut self) -> u64 {
        self.errors
    }

    fn max_frame_bytes(&self) -> usize {
        HEADER_BYTES + MAX_PACKET_BYTES
    }

    fn no_copies(&self) -> Option<&'static str> {
        Some(NO_COPIES)
    }

    fn max_held_per_pipe(&self) -> Option<HeldBound> {
        Some(self.held.clone())
    }

    fn tx_discard(&mut self, frame: &[u8]) {
        let Some(id) = frame_id(frame) else { return };
        match &self.raw {
            // A stolen packet was dropped in the kernel when read.
            Some((_, held)) if !held.take(id) => {}
            _ => self.verdicts.push(id, Verdict::Drop, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_survives_one_corrupted_copy_and_a_split_is_refused() {
        let h = header(0x0102_0304, 0x0800, b"\x45");
        assert_eq!(frame_id(&h), Some(0x0102_0304));
        for bit in 0..96 {
            let mut c = h;
            c[bit / 8] ^= 0x80 >> (bit % 8);
            assert_eq!(frame_id(&c), Some(0x0102_0304), "bit {bit}");
        }
        let mut c = h;
        c[0] ^= 1;
        c[4] ^= 2;
        assert_eq!(frame_id(&c), None);
        assert_eq!(&header(1, 0, b"\x60")[12..], &[0x86, 0xdd]);
    }

    #[test]
    fn marked_oversized_and_scoped_packets_are_held_the_rest_stolen() {
        let v4 = |len: usize| {
            let mut p = vec![0u8; len];
            p[0] = 0x45;
            p
        };
        let v6_to = |first: [u8; 2]| {
            let mut p = vec![0u8; 100];
            p[0] = 0x60;
            p[24..26].copy_from_slice(&first);
            p
        };
        assert_eq!(must_hold(&v4(1500), 0, Some(1500)), None);
        assert_eq!(must_hold(&v4(1501), 0, Some(1500)), Some(Hold::OverMtu));
        assert_eq!(must_hold(&v4(4028), 0, Some(65536)), None);
        assert_eq!(must_hold(&v4(1281), 0, None), Some(Hold::OverMtu));
        assert_eq!(must_hold(&v4(60), 7, Some(1500)), Some(Hold::Marked));
        assert_eq!(
            must_hold(&v6_to([0xfe, 0x80]), 0, Some(1500)),
            Some(Hold::Scoped)
        );
        assert_eq!(
            must_hold(&v6_to([0xff, 0x02]), 0, Some(1500)),
            Some(Hold::Scoped)
        );
        assert_eq!(must_hold(&v6_to([0x20, 0x01]), 0, Some(1500)), None);
        assert_eq!(must_hold(&v6_to([0xfe, 0xc0]), 0, Some(1500)), None);
    }

    #[test]
    fn a_held_id_is_taken_once() {
        let h = HeldIds::default();
        assert!(!h.take(3));
        h.insert(3);
        h.insert(3);
        assert!(h.take(3));
        assert!(!h.take(3));
        assert_eq!(h.count.load(Ordering::Relaxed), 0);
    }
}

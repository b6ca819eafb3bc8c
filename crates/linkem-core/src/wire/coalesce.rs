//! Merging consecutive TCP wire frames of one flow into one super-frame for
//! the receiving host (GSO on transmit), by the rules Linux's GRO uses to
//! merge them on receive (`tcp_gro_receive`, `inet_gro_receive`,
//! `ipv6_gro_receive`), so the host's stack handles the run once instead of
//! once per frame, and sees what its own GRO on a real NIC would have built.
//!
//! A frame is a *candidate* ([`TcpSegment::of`]) when it is Ethernet (with
//! any tags) + IPv4 without options (IHL 5, not a fragment) or IPv6 without
//! extension headers + TCP with payload; its IPv4 header checksum and TCP
//! checksum verify (GRO merges only frames whose checksum was verified: a
//! merged frame is handed over with its checksum still to compute, which
//! would otherwise hide a corrupt frame); none of SYN, RST, URG, CWR is set;
//! and it ends where its IP datagram does (no padding).
//!
//! Frame `n` joins the super-frame of frames `0..n` ([`Coalescer::append`])
//! when, with `mss` the payload length of frame 0:
//! - bytes `0..l3` (Ethernet and tags) are equal;
//! - the IP headers are equal apart from IPv4 total length, ID and header
//!   checksum, or IPv6 payload length, and `id_n = id_{n-1} + 1 (mod 2^16)`
//!   (Linux TSO/GSO numbering, which segmentation redoes), or, with DF set,
//!   `id_n = id_{n-1}` (an atomic datagram's ID means nothing, RFC 6864, and
//!   GRO merges fixed IDs too; a segmentation of the result numbers them);
//! - the TCP headers are equal apart from the sequence number, checksum and
//!   PSH/FIN: ports, ACK number, data offset, flags, window, urgent pointer
//!   and all options (timestamps included: segmentation copies them into
//!   every segment);
//! - `seq_n = seq_{n-1} + len_{n-1} (mod 2^32)`;
//! - frame `n-1` did not end the run: its payload was `mss` bytes and it had
//!   neither PSH nor FIN (so `len_n <= mss`, and a short, PSH or FIN frame is
//!   always last);
//! - the result stays within [`MAX_SEGMENTS`] frames and an IP length field
//!   (`l3 header + l4 <= 65535`), GRO's own limits.
//!
//! [`Coalescer::finish`] patches the merged headers: IPv4 total length and
//! header checksum (or IPv6 payload length), PSH/FIN of the last frame, and
//! the TCP checksum field set to the folded pseudo-header sum of the merged
//! length, with [`Offload`] `csum = (l4, 16)` (NEEDS_CSUM) and `gso = (TcpV4
//! or TcpV6, mss)`. Invariant: [`super::segment`] of the result gives back
//! exactly the frames that were appended (tested).

use super::bytes::{read16, write16};
use super::checksum::{add, fold, sum};
use super::headers::{
    locate, IpVersion, L4Proto, TCP_CWR, TCP_FIN, TCP_PSH, TCP_RST, TCP_SYN, TCP_URG,
};
use super::{CsumPartial, Gso, GsoKind, Offload};

/// Most frames in one super-frame: what one NAPI poll hands GRO at most (its
/// budget is 64 packets) and what Linux's GRO merges at most.
pub const MAX_SEGMENTS: usize = 64;
/// Largest IP length field: IPv4 total length or IPv6 payload length.
const MAX_IP_LEN: usize = 65535;

/// The Don't Fragment bit, in the high byte of the IPv4 flags/offset field.
const IPV4_DF: u8 = 0x40;

/// A frame that may take part in a super-frame: where its headers are and
/// the fields the rule compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSegment {
    /// First byte of the IP header.
    pub l3_offset: usize,
    /// First byte of the TCP header.
    pub l4_offset: usize,
    /// First byte of the payload (= header bytes).
    pub payload_offset: usize,
    /// IP version.
    pub ip: IpVersion,
    /// TCP sequence number.
    pub seq: u32,
    /// Payload bytes.
    pub payload_bytes: usize,
    /// TCP flags byte.
    pub flags: u8,
    /// IPv4 identification (0 for IPv6).
    pub ip_id: u16,
}

impl TcpSegment {
    /// The frame as a candidate, or `None` when it can never be merged (see
    /// the module doc). Costs one checksum pass over the TCP segment.
    pub fn of(frame: &[u8]) -> Option<TcpSegment> {
        Self::parse(frame, true)
    }

    /// [`TcpSegment::of`] for a frame whose TCP checksum the caller computed
    /// itself and has not changed since (a wire frame linkem cut from a
    /// super-frame, [`super::segment`]): the checksum pass is skipped, every
    /// other condition is checked. A frame from anywhere else must go through
    /// [`TcpSegment::of`], since GRO merges only frames that verify.
    pub fn of_checksummed(frame: &[u8]) -> Option<TcpSegment> {
        Self::parse(frame, false)
    }

    fn parse(frame: &[u8], verify: bool) -> Option<TcpSegment> {
        let h = locate(frame).ok()?;
        if h.l4 != L4Proto::Tcp || h.ip_end != frame.len() || h.payload_offset >= h.ip_end {
            return None;
        }
        let l3 = h.l3_offset;
        let ip_id = match h.ip {
            IpVersion::V4 => {
                if h.l4_offset - l3 != 20 || fold(u64::from(sum(&frame[l3..l3 + 20]))) != 0xffff {
                    return None;
                }
                read16(frame, l3 + 4)?
            }
            IpVersion::V6 => {
                if h.l4_offset - l3 != 40 {
                    return None;
                }
                0
            }
        };
        let l4 = h.l4_offset;
        let flags = frame[l4 + 13];
        if flags & (TCP_SYN | TCP_RST | TCP_URG | TCP_CWR) != 0 {
            return None;
        }
        let l4_bytes = h.ip_end - l4;
        if verify && add(fold(h.pseudo_sum(l4_bytes)), sum(&frame[l4..h.ip_end])) != 0xffff {
            return None;
        }
        Some(TcpSegment {
            l3_offset: l3,
            l4_offset: l4,
            payload_offset: h.payload_offset,
            ip: h.ip,
            seq: u32::from_be_bytes(frame[l4 + 4..l4 + 8].try_into().ok()?),
            payload_bytes: h.ip_end - h.payload_offset,
            flags,
            ip_id,
        })
    }

    fn ends_run(&self, mss: usize) -> bool {
        self.payload_bytes < mss || self.flags & (TCP_PSH | TCP_FIN) != 0
    }
}

/// Builds one super-frame at a time in a buffer it keeps (64 KiB once grown).
#[derive(Debug, Default, Clone)]
pub struct Coalescer {
    buf: Vec<u8>,
    first: Option<TcpSegment>,
    last: Option<TcpSegment>,
    segments: usize,
}

/// Whether the IP and TCP headers of `a` and `b` (both candidates with the
/// same offsets) are equal in every field the rule compares.
fn same_headers(a: &[u8], b: &[u8], s: &TcpSegment) -> bool {
    let (l3, l4, p) = (s.l3_offset, s.l4_offset, s.payload_offset);
    let ip_same = match s.ip {
        // Version..TOS; flags/fragment, TTL, protocol; addresses.
        IpVersion::V4 => {
            a[l3..l3 + 2] == b[l3..l3 + 2]
                && a[l3 + 6..l3 + 10] == b[l3 + 6..l3 + 10]
                && a[l3 + 12..l4] == b[l3 + 12..l4]
        }
        // Version, traffic class, flow label; next header, hop limit, addresses.
        IpVersion::V6 => a[l3..l3 + 4] == b[l3..l3 + 4] && a[l3 + 6..l4] == b[l3 + 6..l4],
    };
    ip_same
        && a[..l3] == b[..l3]
        // Ports; ACK number; data offset.
        && a[l4..l4 + 4] == b[l4..l4 + 4]
        && a[l4 + 8..l4 + 13] == b[l4 + 8..l4 + 13]
        && (a[l4 + 13] ^ b[l4 + 13]) & !(TCP_PSH | TCP_FIN) == 0
        // Window, (checksum skipped), urgent pointer, options.
        && a[l4 + 14..l4 + 16] == b[l4 + 14..l4 + 16]
        && a[l4 + 18..p] == b[l4 + 18..p]
}

impl Coalescer {
    /// An empty coalescer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Frames in the super-frame being built.
    pub fn segments(&self) -> usize {
        self.segments
    }

    /// True when no frame is held.
    pub fn is_empty(&self) -> bool {
        self.segments == 0
    }

    /// Starts a new super-frame with `frame` (described by `seg`), dropping
    /// whatever was held: call [`Coalescer::finish`] first.
    pub fn start(&mut self, frame: &[u8], seg: TcpSegment) {
        self.buf.clear();
        self.buf.extend_from_slice(frame);
        self.first = Some(seg);
        self.last = Some(seg);
        self.segments = 1;
    }

    /// Appends `frame` if the rule lets it join (module doc); returns whether
    /// it did. Nothing changes when it does not.
    pub fn append(&mut self, frame: &[u8], seg: TcpSegment) -> bool {
        let (Some(first), Some(last)) = (self.first, self.last) else {
            return false;
        };
        let mss = first.payload_bytes;
        let fits = self.segments < MAX_SEGMENTS
            && self.buf.len() - first.l3_offset + seg.payload_bytes <= MAX_IP_LEN;
        let joins = fits
            && seg.l3_offset == first.l3_offset
            && seg.payload_offset == first.payload_offset
            && seg.ip == first.ip
            && !last.ends_run(mss)
            && seg.payload_bytes <= mss
            && seg.seq == last.seq.wrapping_add(last.payload_bytes as u32)
            && (seg.ip == IpVersion::V6
                || seg.ip_id == last.ip_id.wrapping_add(1)
                || (seg.ip_id == last.ip_id && frame[seg.l3_offset + 6] & IPV4_DF != 0))
            && same_headers(&self.buf, frame, &first);
        if joins {
            self.buf.extend_from_slice(&frame[seg.payload_offset..]);
            self.last = Some(seg);
            self.segments += 1;
        }
        joins
    }

    /// The super-frame built so far and what the kernel must do with it, and
    /// empties the coalescer. One frame comes back unchanged with no offload
    /// (it is a finished wire frame); `None` when nothing is held.
    pub fn finish(&mut self) -> Option<(&[u8], Offload)> {
        let (first, last) = (self.first.take()?, self.last.take()?);
        let n = std::mem::take(&mut self.segments);
        if n == 1 {
            return Some((&self.buf, Offload::default()));
        }
        let buf = &mut self.buf;
        let len = buf.len();
        let (l3, l4) = (first.l3_offset, first.l4_offset);
        let kind = match first.ip {
            IpVersion::V4 => {
                write16(buf, l3 + 2, (len - l3) as u16);
                write16(buf, l3 + 10, 0);
                let c = !fold(u64::from(sum(&buf[l3..l3 + 20])));
                write16(buf, l3 + 10, c);
                GsoKind::TcpV4
            }
            IpVersion::V6 => {
                write16(buf, l3 + 4, (len - l4) as u16);
                GsoKind::TcpV6
            }
        };
        buf[l4 + 13] |= last.flags & (TCP_PSH | TCP_FIN);
        // NEEDS_CSUM: the field holds the folded pseudo-header sum, and the
        // kernel (or the receiver) adds the segment's bytes to it.
        let h = locate(buf).ok()?;
        let pseudo = fold(h.pseudo_sum(len - l4));
        write16(buf, l4 + 16, pseudo);
        let offload = Offload {
            csum: Some(CsumPartial {
                start: l4 as u16,
                offset: 16,
            }),
            gso: Some(Gso {
                kind,
                size: first.payload_bytes as u16,
            }),
        };
        Some((&self.buf, offload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::segment;

    const MSS: usize = 1448;

    /// An Ethernet + IPv4 (or IPv6) + TCP frame with timestamps, checksums
    /// complete, as a host's segmentation would send it.
    fn tcp(v6: bool, seq: u32, id: u16, len: usize, flags: u8, tsval: u32) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        let l4_len = 32 + len;
        if v6 {
            f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
            let mut ip = vec![0x60, 0, 0, 0];
            ip.extend_from_slice(&(l4_len as u16).to_be_bytes());
            ip.extend_from_slice(&[6, 64]);
            ip.extend_from_slice(&[0xfd; 16]);
            ip.extend_from_slice(&[0xfe; 16]);
            f.extend_from_slice(&ip);
        } else {
            f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            let mut ip = vec![0x45, 0];
            ip.extend_from_slice(&((20 + l4_len) as u16).to_be_bytes());
            ip.extend_from_slice(&id.to_be_bytes());
            ip.extend_from_slice(&[0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
            let c = !fold(u64::from(sum(&ip)));
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&ip);
        }
        let l4 = f.len();
        let mut th = vec![0x13, 0x89, 0xa0, 0x00];
        th.extend_from_slice(&seq.to_be_bytes());
        th.extend_from_slice(&77u32.to_be_bytes());
        th.extend_from_slice(&[0x80, 0x10 | flags, 0x01, 0xf5, 0, 0, 0, 0]);
        th.extend_from_slice(&[1, 1, 8, 10]);
        th.extend_from_slice(&tsval.to_be_bytes());
        th.extend_from_slice(&9u32.to_be_bytes());
        f.extend_from_slice(&th);
        f.extend((0..len).map(|i| (seq as usize + i) as u8));
        let h = locate(&f).unwrap();
        let c = !add(fold(h.pseudo_sum(l4_len)), sum(&f[l4..]));
        f[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
        f
    }

    fn v4(seq: u32, id: u16, len: usize) -> Vec<u8> {
        tcp(false, seq, id, len, 0, 5)
    }

    /// Appends frames in turn; returns how many joined.
    fn run(c: &mut Coalescer, frames: &[Vec<u8>]) -> usize {
        let s = TcpSegment::of(&frames[0]).unwrap();
        c.start(&frames[0], s);
        frames[1..]
            .iter()
            .filter(|f| TcpSegment::of(f).is_some_and(|s| c.append(f, s)))
            .count()
    }

    /// The super-frame cut back by `segment` is the frames appended.
    fn round_trip(frames: &[Vec<u8>]) {
        let mut c = Coalescer::new();
        assert_eq!(run(&mut c, frames), frames.len() - 1, "all should join");
        let (sf, off) = c.finish().unwrap();
        let sf = sf.to_vec();
        let mut out = Vec::new();
        segment(&sf, off, 1514, &mut |s| out.push(s.to_vec())).unwrap();
        assert_eq!(out.len(), frames.len());
        for (i, (a, b)) in out.iter().zip(frames).enumerate() {
            assert_eq!(a, b, "segment {i} differs");
        }
        assert!(c.is_empty());
    }

    #[test]
    fn a_run_of_one_flow_merges_and_cuts_back_to_the_same_frames() {
        let frames: Vec<_> = (0..10)
            .map(|i| v4(1000 + i * MSS as u32, 7 + i as u16, MSS))
            .collect();
        round_trip(&frames);
        // A short last frame with PSH ends the run and keeps its PSH.
        let mut frames: Vec<_> = (0..3).map(|i| v4(i * MSS as u32, i as u16, MSS)).collect();
        frames.push(tcp(false, 3 * MSS as u32, 3, 100, TCP_PSH, 5));
        round_trip(&frames);
        // IPv6, and sequence and ID numbers that wrap.
        let frames: Vec<_> = (0..4)
            .map(|i| {
                tcp(
                    true,
                    (u32::MAX - 1000).wrapping_add(i * 1428),
                    0,
                    1428,
                    0,
                    5,
                )
            })
            .collect();
        round_trip(&frames);
        let frames: Vec<_> = (0..3)
            .map(|i| {
                v4(
                    (u32::MAX - 10).wrapping_add(i * MSS as u32),
                    u16::MAX.wrapping_add(i as u16),
                    MSS,
                )
            })
            .collect();
        round_trip(&frames);
    }

    #[test]
    fn the_super_frame_carries_gso_and_a_partial_checksum() {
        let frames: Vec<_> = (0..3).map(|i| v4(i * MSS as u32, i as u16, MSS)).collect();
        let mut c = Coalescer::new();
        run(&mut c, &frames);
        let (sf, off) = c.finish().unwrap();
        assert_eq!(sf.len(), 14 + 20 + 32 + 3 * MSS);
        assert_eq!(
            off,
            Offload {
                csum: Some(CsumPartial {
                    start: 34,
                    offset: 16
                }),
                gso: Some(Gso {
                    kind: GsoKind::TcpV4,
                    size: MSS as u16
                })
            }
        );
        // IPv4 header checksum valid; total length covers all three.
        assert_eq!(fold(u64::from(sum(&sf[14..34]))), 0xffff);
        assert_eq!(read16(sf, 16), Some((20 + 32 + 3 * MSS) as u16));
        // One frame alone comes back untouched, without offload.
        let s = TcpSegment::of(&frames[0]).unwrap();
        c.start(&frames[0], s);
        assert_eq!(c.finish(), Some((&frames[0][..], Offload::default())));
        assert_eq!(c.finish(), None);
    }

    #[test]
    fn what_does_not_merge() {
        let base = |i: u32| v4(i * MSS as u32, i as u16, MSS);
        let mut c = Coalescer::new();
        let joins = |c: &mut Coalescer, second: Vec<u8>| run(c, &[base(0), second]) == 1;
        assert!(joins(&mut c, base(1)));
        // A gap in sequence (a frame lost between), a repeat (a duplicate),
        // an earlier one (reordered).
        assert!(!joins(&mut c, v4(2 * MSS as u32, 1, MSS)));
        assert!(!joins(&mut c, v4(0, 1, MSS)));
        // IP ID not consecutive; the same ID joins with DF (set by `tcp`),
        // not without.
        assert!(!joins(&mut c, v4(MSS as u32, 5, MSS)));
        assert!(joins(&mut c, v4(MSS as u32, 0, MSS)));
        let no_df = |seq: u32| {
            let mut f = v4(seq, 0, MSS);
            f[20] = 0;
            f[24..26].copy_from_slice(&[0, 0]);
            let c = !fold(u64::from(sum(&f[14..34])));
            f[24..26].copy_from_slice(&c.to_be_bytes());
            f
        };
        assert_eq!(run(&mut c, &[no_df(0), no_df(MSS as u32)]), 0);
        // Another flow: other port.
        let mut other = base(1);
        other[34] = 0x20;
        let fix = |f: &mut Vec<u8>| {
            f[50..52].copy_from_slice(&[0, 0]);
            let h = locate(f).unwrap();
            let c = !add(fold(h.pseudo_sum(f.len() - 34)), sum(&f[34..]));
            f[50..52].copy_from_slice(&c.to_be_bytes());
        };
        fix(&mut other);
        assert!(TcpSegment::of(&other).is_some());
        assert!(!joins(&mut c, other));
        // A different timestamp option, a different window, a CE mark.
        assert!(!joins(&mut c, tcp(false, MSS as u32, 1, MSS, 0, 6)));
        let mut win = base(1);
        win[48] ^= 1;
        fix(&mut win);
        assert!(!joins(&mut c, win));
        let mut ce = base(1);
        ce[15] |= 3;
        ce[24..26].copy_from_slice(&[0, 0]);
        let ipc = !fold(u64::from(sum(&ce[14..34])));
        ce[24..26].copy_from_slice(&ipc.to_be_bytes());
        assert!(TcpSegment::of(&ce).is_some());
        assert!(!joins(&mut c, ce));
        // A frame longer than the first one's payload (the MSS).
        assert!(!joins(&mut c, v4(MSS as u32, 1, MSS + 1)));
        // After a short frame, or one with PSH, nothing joins.
        let short = v4(MSS as u32, 1, 100);
        assert_eq!(run(&mut c, &[base(0), short]), 1);
        let next = v4(MSS as u32 + 100, 2, 100);
        assert!(!c.append(&next, TcpSegment::of(&next).unwrap()));
        let psh = tcp(false, 0, 0, MSS, TCP_PSH, 5);
        assert_eq!(run(&mut c, &[psh, base(1)]), 0);
    }

    #[test]
    fn a_frame_checksummed_by_the_caller_skips_only_the_checksum_pass() {
        let good = v4(0, 0, MSS);
        assert_eq!(TcpSegment::of_checksummed(&good), TcpSegment::of(&good));
        // A payload bit changed after the checksum: only `of` can tell.
        let mut bad = good.clone();
        bad[100] ^= 0x10;
        assert_eq!(TcpSegment::of(&bad), None);
        assert_eq!(TcpSegment::of_checksummed(&bad), TcpSegment::of(&good));
        // Everything else is still checked.
        let mut hdr = good.clone();
        hdr[24] ^= 1;
        assert_eq!(TcpSegment::of_checksummed(&hdr), None);
        assert_eq!(TcpSegment::of_checksummed(&v4(0, 0, 0)), None);
        assert_eq!(
            TcpSegment::of_checksummed(&tcp(false, 0, 0, 10, TCP_SYN, 5)),
            None
        );
        let mut udp = v4(0, 0, 10);
        udp[23] = 17;
        assert_eq!(TcpSegment::of_checksummed(&udp), None);
    }

    #[test]
    fn frames_that_are_never_candidates() {
        // A corrupt payload bit (the model's `corrupt`): the checksum fails.
        let mut bad = v4(0, 0, MSS);
        bad[100] ^= 0x10;
        assert_eq!(TcpSegment::of(&bad), None);
        // A corrupt IPv4 header checksum.
        let mut bad = v4(0, 0, MSS);
        bad[24] ^= 1;
        assert_eq!(TcpSegment::of(&bad), None);
        // No payload (a pure ACK), SYN, CWR.
        assert_eq!(TcpSegment::of(&v4(0, 0, 0)), None);
        assert_eq!(TcpSegment::of(&tcp(false, 0, 0, 10, TCP_SYN, 5)), None);
        assert_eq!(TcpSegment::of(&tcp(false, 0, 0, 10, TCP_CWR, 5)), None);
        // Padded after the datagram; UDP; truncated garbage.
        let mut padded = v4(0, 0, 4);
        padded.extend_from_slice(&[0; 4]);
        assert_eq!(TcpSegment::of(&padded), None);
        let mut udp = v4(0, 0, 10);
        udp[23] = 17;
        assert_eq!(TcpSegment::of(&udp), None);
        assert_eq!(TcpSegment::of(&[0u8; 20]), None);
        assert_eq!(TcpSegment::of(&[]), None);
    }

    #[test]
    fn limits_of_64_frames_and_64_kib() {
        // 64 KB: at MSS 1448, 45 frames fit a 65535-byte IP length, not 46.
        let frames: Vec<_> = (0..46).map(|i| v4(i * MSS as u32, i as u16, MSS)).collect();
        let mut c = Coalescer::new();
        assert_eq!(run(&mut c, &frames), 44);
        let (sf, _) = c.finish().unwrap();
        assert!(sf.len() - 14 <= 65535);
        // 64 frames at most, however small.
        let frames: Vec<_> = (0..70).map(|i| v4(i * 100, i as u16, 100)).collect();
        assert_eq!(run(&mut c, &frames), 63);
        assert_eq!(c.segments(), 64);
        // The frame that did not fit starts the next super-frame.
        let s = TcpSegment::of(&frames[64]).unwrap();
        c.finish();
        c.start(&frames[64], s);
        let s = TcpSegment::of(&frames[65]).unwrap();
        assert!(c.append(&frames[65], s));
    }
}

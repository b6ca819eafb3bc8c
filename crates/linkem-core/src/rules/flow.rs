//! Packet headers parsed once into the key the classifier and the flow masks read.
//!
//! Hand-written rather than taken from a packet crate: the key needs a dozen
//! fields from the first ~80 bytes of a frame, from every link type a capture
//! may carry (Ethernet with any number of 802.1Q/802.1ad tags, Linux cooked v1
//! and v2, BSD loopback, raw IPv4/IPv6), with no allocation and no copies; the
//! crates we looked at slice Ethernet and IP but not the cooked and loopback
//! headers, and return richer structures than the classifier reads. Every read
//! is a bounds-checked `get`, so no input can panic (fuzz target `rules`
//! feeds arbitrary frames through [`FlowKey::parse`]).
//!
//! # What is read
//! - L2: the EtherType after the tags (`mac-type`), VLAN tags skipped.
//! - IPv4: addresses, protocol, total length (`iplen`), TTL, DSCP, fragment
//!   offset and more-fragments flag. IPv6: addresses, next header after the
//!   hop-by-hop, routing, destination-options and fragment extension headers,
//!   payload length + 40 (`iplen`), hop limit (`ipttl`), traffic class, flow label.
//! - L4 (only in a first or unfragmented packet): TCP/UDP/SCTP ports, TCP
//!   flags, ICMP type/code (kept in `src_port`/`dst_port`, as ipfw's flow id does).
//!
//! - Not from the bytes: the owner of a local socket (`uid`, `gid`), which
//!   only a front end taking packets from the host's stack can fill in
//!   ([`FlowKey::owner`]).
//!
//! A truncated header yields the fields read before the cut; a missing field
//! makes every rule that tests it fail to match, as in ipfw.
//!
//! A super-frame's segments get their keys from the super-frame's, without
//! cutting ([`FlowKey::of_segment`]), so that a burst may cross whole through
//! rules too.

use crate::wire::headers::{TCP_CWR, TCP_FIN, TCP_PSH};
use crate::wire::SegmentPlan;

/// The link layer a frame starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L2Kind {
    /// Ethernet II (pcap link type 1); up to eight 802.1Q/802.1ad tags are
    /// skipped to reach the EtherType.
    Ethernet,
    /// IPv4 or IPv6, told apart by the version nibble.
    RawIp,
    /// Raw IPv4, no link header (pcap link type 228).
    Ipv4,
    /// Raw IPv6, no link header (pcap link type 229).
    Ipv6,
    /// BSD loopback: a 4-byte address family in host order.
    Null,
    /// Linux cooked capture v1 (16-byte header).
    LinuxSll,
    /// Linux cooked capture v2 (20-byte header).
    LinuxSll2,
}

impl L2Kind {
    /// The kind for a pcap link type number, if linkem reads it.
    pub fn from_dlt(dlt: u32) -> Option<L2Kind> {
        Some(match dlt {
            0 => L2Kind::Null,
            1 => L2Kind::Ethernet,
            101 => L2Kind::RawIp,
            113 => L2Kind::LinuxSll,
            228 => L2Kind::Ipv4,
            229 => L2Kind::Ipv6,
            276 => L2Kind::LinuxSll2,
            _ => return None,
        })
    }
}

/// IP version of a packet (0 = not IP).
pub const NOT_IP: u8 = 0;

/// The fields of one frame the rules and masks read. Addresses are kept as
/// 128-bit numbers: an IPv4 address `a.b.c.d` as the mapped `::ffff:a.b.c.d`,
/// so one comparison serves both families.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// 0 (not IP), 4 or 6.
    pub ip_version: u8,
    /// IP protocol; for IPv6 the next header after the hop-by-hop, routing,
    /// destination-options and fragment headers (at most eight are walked).
    /// 0 when not IP.
    pub proto: u8,
    /// Source address as a 128-bit number (IPv4 in mapped form, see
    /// [`v4_mapped`]); 0 when not IP.
    pub src_ip: u128,
    /// Destination address, as `src_ip`.
    pub dst_ip: u128,
    /// Ports exist (TCP, UDP, SCTP, ICMP type/code) and were read.
    pub has_ports: bool,
    /// TCP, UDP, SCTP or UDP-Lite source port; ICMP/ICMPv6 type. 0 unless
    /// `has_ports`.
    pub src_port: u16,
    /// TCP, UDP, SCTP or UDP-Lite destination port; ICMP/ICMPv6 code. 0
    /// unless `has_ports`.
    pub dst_port: u16,
    /// EtherType after VLAN tags (0 when the link type has none).
    pub ether_type: u16,
    /// IP total length (IPv6: payload length + 40).
    pub ip_len: u16,
    /// IPv4 TTL or IPv6 hop limit (`ipttl`).
    pub ttl: u8,
    /// DSCP, the upper six bits of the IPv4 TOS byte or IPv6 traffic class
    /// (`dscp`).
    pub dscp: u8,
    /// ECN field (0 not-ECT, 1 ECT(1), 2 ECT(0), 3 CE).
    pub ecn: u8,
    /// TCP flags byte (FIN 0x01 ... CWR 0x80); valid when `proto` is 6 and `has_ports`.
    pub tcp_flags: u8,
    /// A fragment other than the first (ipfw's `frag`).
    pub later_fragment: bool,
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
    /// Owner of the local socket that sent or will receive the packet
    /// (`uid`, `gid`): known only where the kernel tells it (host mode, from
    /// the netfilter queue's NFQA_UID/NFQA_GID); `None` on the bridge, in a
    /// replay and for packets of no local socket, where `uid`/`gid` never match.
    pub owner: Option<SocketOwner>,
}

/// User and group of a local socket, as the kernel reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SocketOwner {
    /// The socket's user id (the file's owner for a socket).
    pub uid: u32,
    /// The socket's group id.
    pub gid: u32,
}

/// The IPv4-mapped form of an IPv4 address.
#[inline]
pub const fn v4_mapped(addr: u32) -> u128 {
    0xffff_0000_0000u128 | addr as u128
}

#[inline]
fn be16(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*d.get(at)?, *d.get(at + 1)?]))
}

fn be128(d: &[u8], at: usize) -> Option<u128> {
    let s = d.get(at..at.checked_add(16)?)?;
    let mut b = [0u8; 16];
    b.copy_from_slice(s);
    Some(u128::from_be_bytes(b))
}

fn be32(d: &[u8], at: usize) -> Option<u32> {
    let s = d.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86dd;

impl FlowKey {
    /// The key of segment `i` of a super-frame whose key is `self`, cut as
    /// `plan` says: what [`FlowKey::parse`] reads from that segment as
    /// [`segment`](crate::wire::segment) writes it, without cutting. Of the
    /// fields a key holds only two differ between a super-frame's segments,
    /// as TSO writes them (and RFC 9293's segmentation implies): the IP length
    /// (`plan`'s segment length less the link header) and, for TCP, the flags
    /// (FIN and PSH on the last segment only, CWR on the first only).
    pub fn of_segment(&self, plan: &SegmentPlan, i: usize) -> FlowKey {
        let ip_bytes = plan.frame_bytes(i).saturating_sub(plan.l3_offset);
        let mut key = FlowKey {
            ip_len: u16::try_from(ip_bytes).unwrap_or(u16::MAX),
            ..*self
        };
        if key.proto == 6 && key.has_ports {
            if i + 1 < plan.segments {
                key.tcp_flags &= !(TCP_FIN | TCP_PSH);
            }
            if i > 0 {
                key.tcp_flags &= !TCP_CWR;
            }
        }
        key
    }

    /// Parses a frame. Never panics; reads at most the headers.
    pub fn parse(frame: &[u8], l2: L2Kind) -> FlowKey {
        let mut key = FlowKey::default();
        let (ether_type, at) = match l2 {
            L2Kind::Ethernet => {
                let mut at = 12;
                let mut et = be16(frame, at).unwrap_or(0);
                // 802.1Q, 802.1ad and the old QinQ types; a bounded number of tags.
                let mut tags = 0;
                while matches!(et, 0x8100 | 0x88a8 | 0x9100 | 0x9200) && tags < 8 {
                    at += 4;
                    tags += 1;
                    et = be16(frame, at).unwrap_or(0);
                }
                (et, at + 2)
            }
            L2Kind::LinuxSll => (be16(frame, 14).unwrap_or(0), 16),
            L2Kind::LinuxSll2 => (be16(frame, 0).unwrap_or(0), 20),
            L2Kind::Null => {
                let family = frame
                    .get(0..4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .unwrap_or(0);
                let family = if family > 0xffff {
                    family.swap_bytes()
                } else {
                    family
                };
                // AF_INET is 2 everywhere; AF_INET6 is 24, 28 or 30 by system.
                let et = match family {
                    2 => ETH_IPV4,
                    24 | 28 | 30 => ETH_IPV6,
                    _ => 0,
                };
                (et, 4)
            }
            L2Kind::Ipv4 => (ETH_IPV4, 0),
            L2Kind::Ipv6 => (ETH_IPV6, 0),
            L2Kind::RawIp => match frame.first().map(|b| b >> 4) {
                Some(4) => (ETH_IPV4, 0),
                Some(6) => (ETH_IPV6, 0),
                _ => (0, 0),
            },
        };
        if matches!(l2, L2Kind::Ethernet | L2Kind::LinuxSll | L2Kind::LinuxSll2) {
            key.ether_type = ether_type;
        }
        let Some(ip) = frame.get(at..) else {
            return key;
        };
        match ether_type {
            ETH_IPV4 => key.parse_v4(ip),
            ETH_IPV6 => key.parse_v6(ip),
            _ => {}
        }
        key
    }

    fn parse_v4(&mut self, ip: &[u8]) {
        let Some(&vihl) = ip.first() else { return };
        if vihl >> 4 != 4 {
            return;
        }
        let ihl = (vihl & 0x0f) as usize * 4;
        let (Some(tos), Some(len), Some(frag), Some(&ttl), Some(&proto), Some(src), Some(dst)) = (
            ip.get(1),
            be16(ip, 2),
            be16(ip, 6),
            ip.get(8),
            ip.get(9),
            be32(ip, 12),
            be32(ip, 16),
        ) else {
            return;
        };
        if ihl < 20 {
            return;
        }
        self.ip_version = 4;
        self.dscp = tos >> 2;
        self.ecn = tos & 3;
        self.ip_len = len;
        self.ttl = ttl;
        self.proto = proto;
        self.src_ip = v4_mapped(src);
        self.dst_ip = v4_mapped(dst);
        let offset = frag & 0x1fff;
        self.later_fragment = offset != 0;
        if offset == 0 {
            if let Some(l4) = ip.get(ihl..) {
                self.parse_l4(l4);
            }
        }
    }

    fn parse_v6(&mut self, ip: &[u8]) {
        let (Some(head), Some(plen), Some(&next), Some(&hlim), Some(src), Some(dst)) = (
            be32(ip, 0),
            be16(ip, 4),
            ip.get(6),
            ip.get(7),
            be128(ip, 8),
            be128(ip, 24),
        ) else {
            return;
        };
        if head >> 28 != 6 {
            return;
        }
        self.ip_version = 6;
        self.dscp = ((head >> 22) & 0x3f) as u8;
        self.ecn = ((head >> 20) & 3) as u8;
        self.flow_label = head & 0xf_ffff;
        self.ip_len = plen.saturating_add(40);
        self.ttl = hlim;
        self.src_ip = src;
        self.dst_ip = dst;
        let mut next = next;
        let mut at = 40usize;
        // Extension headers, bounded so a crafted chain cannot loop long.
        for _ in 0..8 {
            match next {
                0 | 43 | 60 => {
                    let (Some(&n), Some(&l)) = (ip.get(at), ip.get(at + 1)) else {
                        self.proto = next;
                        return;
                    };
                    next = n;
                    at += (l as usize + 1) * 8;
                }
                44 => {
                    let (Some(&n), Some(off)) = (ip.get(at), be16(ip, at + 2)) else {
                        self.proto = next;
                        return;
                    };
                    next = n;
                    at += 8;
                    if off >> 3 != 0 {
                        self.later_fragment = true;
                        self.proto = next;
                        return;
                    }
                }
                _ => break,
            }
        }
        self.proto = next;
        if let Some(l4) = ip.get(at..) {
            self.parse_l4(l4);
        }
    }

    fn parse_l4(&mut self, l4: &[u8]) {
        match self.proto {
            6 | 17 | 132 | 136 => {
                if let (Some(s), Some(d)) = (be16(l4, 0), be16(l4, 2)) {
                    self.has_ports = true;
                    self.src_port = s;
                    self.dst_port = d;
                    if self.proto == 6 {
                        self.tcp_flags = l4.get(13).copied().unwrap_or(0);
                    }
                }
            }
            1 | 58 => {
                if let (Some(&t), Some(&c)) = (l4.first(), l4.get(1)) {
                    self.has_ports = true;
                    self.src_port = t as u16;
                    self.dst_port = c as u16;
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn udp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 10];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[14..];
        ip[0] = 0x45;
        ip[1] = 0xb8; // DSCP 46
        ip[2..4].copy_from_slice(&38u16.to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&dst);
        ip[20..22].copy_from_slice(&sport.to_be_bytes());
        ip[22..24].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn ethernet_udp() {
        let k = FlowKey::parse(
            &udp4([10, 0, 0, 1], [10, 0, 0, 2], 5000, 80),
            L2Kind::Ethernet,
        );
        assert_eq!(k.ip_version, 4);
        assert_eq!(k.proto, 17);
        assert_eq!(k.src_ip, v4_mapped(0x0a00_0001));
        assert_eq!((k.src_port, k.dst_port), (5000, 80));
        assert_eq!(
            (k.dscp, k.ttl, k.ip_len, k.ether_type),
            (46, 64, 38, 0x0800)
        );
        assert!(!k.later_fragment);
    }

    #[test]
    fn vlan_tags_are_skipped() {
        let plain = udp4([1, 2, 3, 4], [5, 6, 7, 8], 1, 2);
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&[0x88, 0xa8, 0, 5, 0x81, 0x00, 0, 7]);
        tagged.extend_from_slice(&plain[12..]);
        assert_eq!(
            FlowKey::parse(&tagged, L2Kind::Ethernet),
            FlowKey::parse(&plain, L2Kind::Ethernet)
        );
    }

    #[test]
    fn later_fragment_has_no_ports() {
        let mut f = udp4([1, 2, 3, 4], [5, 6, 7, 8], 1, 2);
        f[14 + 6..14 + 8].copy_from_slice(&0x0010u16.to_be_bytes());
        let k = FlowKey::parse(&f, L2Kind::Ethernet);
        assert!(k.later_fragment && !k.has_ports);
    }

    #[test]
    fn ipv6_tcp_through_extension_header() {
        let mut ip = vec![0u8; 40 + 8 + 20];
        ip[0] = 0x60;
        ip[1] = 0x0a; // flow label 0xa_bcde, traffic class 0
        ip[2] = 0xbc;
        ip[3] = 0xde;
        ip[4..6].copy_from_slice(&28u16.to_be_bytes());
        ip[6] = 0; // hop-by-hop
        ip[7] = 9;
        ip[8 + 15] = 1;
        ip[24 + 15] = 2;
        ip[40] = 6; // next: TCP
        ip[41] = 0; // 8 bytes
        ip[48..50].copy_from_slice(&443u16.to_be_bytes());
        ip[50..52].copy_from_slice(&40000u16.to_be_bytes());
        ip[48 + 13] = 0x12;
        let k = FlowKey::parse(&ip, L2Kind::RawIp);
        assert_eq!((k.ip_version, k.proto, k.ttl), (6, 6, 9));
        assert_eq!((k.src_ip, k.dst_ip), (1, 2));
        assert_eq!((k.src_port, k.dst_port, k.tcp_flags), (443, 40000, 0x12));
        assert_eq!(k.flow_label, 0xa_bcde);
        assert_eq!(k.ip_len, 68);
    }

    #[test]
    fn every_prefix_of_a_frame_parses() {
        let f = udp4([1, 2, 3, 4], [5, 6, 7, 8], 1, 2);
        for kind in [
            L2Kind::Ethernet,
            L2Kind::RawIp,
            L2Kind::Null,
            L2Kind::LinuxSll,
            L2Kind::LinuxSll2,
            L2Kind::Ipv4,
            L2Kind::Ipv6,
        ] {
            for n in 0..=f.len() {
                let _ = FlowKey::parse(&f[..n], kind);
            }
        }
    }
}

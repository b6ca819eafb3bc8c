//! Locating the headers of an Ethernet frame: L2 tags, IP, TCP/UDP.
//!
//! Walks Ethernet II (IEEE 802.3 §3.2.6), any number up to [`MAX_VLAN_TAGS`] of
//! 802.1Q / 802.1ad tags (TPID 0x8100, 0x88a8, and the pre-standard QinQ
//! 0x9100), IPv4 with options (RFC 791 §3.1), IPv6 with hop-by-hop, routing,
//! destination-options and AH extension headers (RFC 8200 §4, RFC 4302 §2.2),
//! then TCP (RFC 9293 §3.1, data offset) or UDP (RFC 768). Fragments (IPv4 MF
//! or offset, IPv6 fragment header) are refused: their L4 header and checksum
//! span several frames.
//!
//! Every read is bounds-checked against the frame and every length against the
//! enclosing one (`l4 header <= IP datagram <= frame`), so [`locate`] returns a
//! [`WireError`] for any malformed input and the offsets it returns are safe to
//! index with.

use super::bytes::read16;
use super::WireError;

/// At most this many VLAN tags are skipped (QinQ uses two; more is taken as garbage).
pub const MAX_VLAN_TAGS: usize = 4;

/// TCP header flags (RFC 9293 §3.1; URG and CWR from RFC 3168), in the
/// flags byte at offset 13 of the TCP header.
pub(crate) const TCP_FIN: u8 = 0x01;
pub(super) const TCP_SYN: u8 = 0x02;
pub(super) const TCP_RST: u8 = 0x04;
pub(crate) const TCP_PSH: u8 = 0x08;
pub(super) const TCP_URG: u8 = 0x20;
/// CWR (RFC 3168 §6.1.2): read by the live stage too, which cuts a burst carrying it.
pub const TCP_CWR: u8 = 0x80;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const TPID_8021Q: u16 = 0x8100;
const TPID_8021AD: u16 = 0x88a8;
const TPID_QINQ_OLD: u16 = 0x9100;

const IPPROTO_HOPOPTS: u8 = 0;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const IPPROTO_ROUTING: u8 = 43;
const IPPROTO_FRAGMENT: u8 = 44;
const IPPROTO_AH: u8 = 51;
const IPPROTO_DSTOPTS: u8 = 60;

/// IP version of a located frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpVersion {
    /// IPv4 (ethertype 0x0800).
    V4,
    /// IPv6 (ethertype 0x86dd).
    V6,
}

/// Transport protocol of a located frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4Proto {
    /// TCP (IP protocol 6).
    Tcp,
    /// UDP (IP protocol 17).
    Udp,
}

impl L4Proto {
    /// Offset of the checksum field from the start of the L4 header.
    pub fn checksum_offset(self) -> usize {
        match self {
            L4Proto::Tcp => 16,
            L4Proto::Udp => 6,
        }
    }

    fn number(self) -> u8 {
        match self {
            L4Proto::Tcp => IPPROTO_TCP,
            L4Proto::Udp => IPPROTO_UDP,
        }
    }
}

/// Where the headers of a frame are. Invariant (checked by [`locate`]):
/// `l3_offset < l4_offset < payload_offset <= ip_end <= frame.len()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Headers {
    /// First byte of the IP header (after Ethernet and tags).
    pub l3_offset: usize,
    /// IP version of the header at `l3_offset`.
    pub ip: IpVersion,
    /// First byte of the TCP/UDP header (after IPv4 options / IPv6 extensions).
    pub l4_offset: usize,
    /// Transport protocol of the header at `l4_offset`.
    pub l4: L4Proto,
    /// First byte of the L4 payload.
    pub payload_offset: usize,
    /// End of the IP datagram by its own length field; bytes after it are L2 padding.
    pub ip_end: usize,
    /// Unfolded sum of the pseudo-header addresses (source + final destination).
    addr_sum: u32,
}

impl Headers {
    /// Sum of the pseudo-header (RFC 9293 §3.1 / RFC 768 for IPv4, RFC 8200 §8.1
    /// for IPv6) for an L4 segment of `l4_bytes`, unfolded.
    pub fn pseudo_sum(&self, l4_bytes: usize) -> u64 {
        let len = l4_bytes as u64;
        u64::from(self.addr_sum) + u64::from(self.l4.number()) + (len >> 16) + (len & 0xffff)
    }

    /// A short name such as "IPv6/UDP", for error messages.
    pub fn describe(&self) -> &'static str {
        match (self.ip, self.l4) {
            (IpVersion::V4, L4Proto::Tcp) => "IPv4/TCP",
            (IpVersion::V4, L4Proto::Udp) => "IPv4/UDP",
            (IpVersion::V6, L4Proto::Tcp) => "IPv6/TCP",
            (IpVersion::V6, L4Proto::Udp) => "IPv6/UDP",
        }
    }
}

fn truncated(layer: &'static str, need: usize, have: usize) -> WireError {
    WireError::Truncated {
        layer,
        need_bytes: need,
        have_bytes: have,
    }
}

fn byte(frame: &[u8], at: usize, layer: &'static str, end: usize) -> Result<u8, WireError> {
    if at < end {
        frame
            .get(at)
            .copied()
            .ok_or(truncated(layer, at + 1, frame.len()))
    } else {
        Err(truncated(layer, at + 1, end))
    }
}

fn word(frame: &[u8], at: usize, layer: &'static str, end: usize) -> Result<u16, WireError> {
    if at + 2 <= end {
        read16(frame, at).ok_or(truncated(layer, at + 2, frame.len()))
    } else {
        Err(truncated(layer, at + 2, end))
    }
}

fn word_sum(b: &[u8]) -> u32 {
    b.chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum()
}

/// Offset of the first byte after the Ethernet header and its VLAN tags, and the
/// inner ethertype.
pub fn locate_l3(frame: &[u8]) -> Result<(usize, u16), WireError> {
    let end = frame.len();
    let mut at = 12;
    let mut ethertype = word(frame, at, "Ethernet header", end)?;
    let mut tags = 0;
    while matches!(ethertype, TPID_8021Q | TPID_8021AD | TPID_QINQ_OLD) {
        tags += 1;
        if tags > MAX_VLAN_TAGS {
            return Err(WireError::TooManyVlanTags { max: MAX_VLAN_TAGS });
        }
        at += 4;
        ethertype = word(frame, at, "VLAN tag", end)?;
    }
    Ok((at + 2, ethertype))
}

/// Locates the IP and TCP/UDP headers of an Ethernet frame.
pub fn locate(frame: &[u8]) -> Result<Headers, WireError> {
    let (l3, ethertype) = locate_l3(frame)?;
    let (ip, ip_end, l4_offset, proto, addr_sum) = match ethertype {
        ETHERTYPE_IPV4 => ipv4(frame, l3)?,
        ETHERTYPE_IPV6 => ipv6(frame, l3)?,
        other => return Err(WireError::NotIp { ethertype: other }),
    };
    let (l4, payload_offset) = match proto {
        IPPROTO_TCP => {
            let doff = byte(frame, l4_offset + 12, "TCP header", ip_end)? >> 4;
            let hlen = usize::from(doff) * 4;
            if hlen < 20 {
                return Err(WireError::BadHeaderLength {
                    layer: "TCP",
                    bytes: hlen,
                });
            }
            if l4_offset + hlen > ip_end {
                return Err(truncated("TCP header", l4_offset + hlen, ip_end));
            }
            (L4Proto::Tcp, l4_offset + hlen)
        }
        IPPROTO_UDP => {
            if l4_offset + 8 > ip_end {
                return Err(truncated("UDP header", l4_offset + 8, ip_end));
            }
            (L4Proto::Udp, l4_offset + 8)
        }
        other => return Err(WireError::UnsupportedProtocol { protocol: other }),
    };
    Ok(Headers {
        l3_offset: l3,
        ip,
        l4_offset,
        l4,
        payload_offset,
        ip_end,
        addr_sum,
    })
}

type IpParts = (IpVersion, usize, usize, u8, u32);

fn ipv4(frame: &[u8], l3: usize) -> Result<IpParts, WireError> {
    let len = frame.len();
    if l3 + 20 > len {
        return Err(truncated("IPv4 header", l3 + 20, len));
    }
    let version = frame[l3] >> 4;
    if version != 4 {
        return Err(WireError::BadIpVersion {
            ethertype: ETHERTYPE_IPV4,
            version,
        });
    }
    let ihl = usize::from(frame[l3] & 0x0f) * 4;
    if ihl < 20 {
        return Err(WireError::BadHeaderLength {
            layer: "IPv4",
            bytes: ihl,
        });
    }
    let total = usize::from(word(frame, l3 + 2, "IPv4 header", len)?);
    if total < ihl {
        return Err(WireError::BadIpLength {
            declared_bytes: total,
            header_bytes: ihl,
        });
    }
    let ip_end = l3 + total;
    if ip_end > len {
        return Err(truncated("IPv4 datagram", ip_end, len));
    }
    let frag = word(frame, l3 + 6, "IPv4 header", len)?;
    if frag & 0x3fff != 0 {
        return Err(WireError::Fragment);
    }
    let proto = frame[l3 + 9];
    Ok((
        IpVersion::V4,
        ip_end,
        l3 + ihl,
        proto,
        word_sum(&frame[l3 + 12..l3 + 20]),
    ))
}

fn ipv6(frame: &[u8], l3: usize) -> Result<IpParts, WireError> {
    let len = frame.len();
    if l3 + 40 > len {
        return Err(truncated("IPv6 header", l3 + 40, len));
    }
    let version = frame[l3] >> 4;
    if version != 6 {
        return Err(WireError::BadIpVersion {
            ethertype: ETHERTYPE_IPV6,
            version,
        });
    }
    let plen = usize::from(word(frame, l3 + 4, "IPv6 header", len)?);
    if plen == 0 && len > l3 + 40 && frame[l3 + 6] == IPPROTO_HOPOPTS {
        return Err(WireError::Jumbogram);
    }
    let ip_end = l3 + 40 + plen;
    if ip_end > len {
        return Err(truncated("IPv6 datagram", ip_end, len));
    }
    let mut next = frame[l3 + 6];
    let mut at = l3 + 40;
    let mut dst = l3 + 24;
    loop {
        match next {
            IPPROTO_TCP | IPPROTO_UDP => break,
            IPPROTO_HOPOPTS | IPPROTO_DSTOPTS | IPPROTO_ROUTING | IPPROTO_AH => {
                let nh = byte(frame, at, "IPv6 extension header", ip_end)?;
                let n = usize::from(byte(frame, at + 1, "IPv6 extension header", ip_end)?);
                let hlen = if next == IPPROTO_AH {
                    (n + 2) * 4
                } else {
                    (n + 1) * 8
                };
                if at + hlen > ip_end {
                    return Err(truncated("IPv6 extension header", at + hlen, ip_end));
                }
                if next == IPPROTO_ROUTING {
                    dst = final_destination(frame, at, hlen)?.unwrap_or(dst);
                }
                next = nh;
                at += hlen;
            }
            IPPROTO_FRAGMENT => return Err(WireError::Fragment),
            other => return Err(WireError::UnsupportedProtocol { protocol: other }),
        }
    }
    let addr_sum = word_sum(&frame[l3 + 8..l3 + 24]) + word_sum(&frame[dst..dst + 16]);
    Ok((IpVersion::V6, ip_end, at, next, addr_sum))
}

/// Where the pseudo-header's destination is when a routing header has segments
/// left (RFC 8200 §8.1: "the final destination"): types 0 (RFC 2460, deprecated)
/// and 2 (RFC 6275) list it last, type 4 (SRH, RFC 8754 §2) first. `None`: the
/// IPv6 destination field is final. `at + hlen` is within the frame (checked by
/// the caller) and `hlen >= 8`.
fn final_destination(frame: &[u8], at: usize, hlen: usize) -> Result<Option<usize>, WireError> {
    let (routing_type, segments_left) = (frame[at + 2], frame[at + 3]);
    if segments_left == 0 {
        return Ok(None);
    }
    match routing_type {
        0 | 2 if hlen >= 24 => Ok(Some(at + hlen - 16)),
        4 if hlen >= 24 => Ok(Some(at + 8)),
        // RFC 8200 §4.4: an unknown type with segments left is not delivered, and
        // we could not tell the destination the pseudo-header needs.
        _ => Err(WireError::UnsupportedRoutingType { routing_type }),
    }
}

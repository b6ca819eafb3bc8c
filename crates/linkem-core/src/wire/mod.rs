//! # Wire frames: offloaded checksums and segmentation
//!
//! Hosts with default settings hand their NIC (here: a veth) frames that are not
//! yet wire frames: a TCP/UDP checksum left for the hardware to finish
//! (CHECKSUM_PARTIAL) and super-frames of up to 64 KB to be cut into MSS-sized
//! segments (TSO/GSO/USO), or frames the kernel merged on receive (GRO). A link
//! emulator must see and deliver what a cable would carry, so this module turns
//! such frames into wire frames:
//!
//! - [`complete_checksum`]: finish a checksum whose location the kernel told us
//!   ([`CsumPartial`], virtio-net header semantics);
//! - [`complete_partial_checksum`]: the same without metadata (AF_XDP), only for
//!   frames whose checksum field holds exactly the pseudo-header sum and that
//!   do not verify, so a frame that arrived with a wrong checksum stays wrong;
//! - [`segment`] / [`Segmenter`]: cut a super-frame into wire frames;
//!   [`segment_plan`]: the lengths it would cut, read from the headers alone;
//! - [`Offload::from_virtio_net_hdr`]: the metadata AF_PACKET gives with
//!   `PACKET_VNET_HDR`, and [`Offload::to_virtio_net_hdr`] the header it takes;
//! - [`Coalescer`]: the reverse of [`segment`], merging consecutive TCP wire
//!   frames of one flow into a super-frame by GRO's rules ([`coalesce`]).
//!
//! [`locate`] finds the headers (Ethernet, 802.1Q/QinQ tags, IPv4 with options,
//! IPv6 with extension headers, TCP/UDP) and is the one place that checks
//! lengths; malformed input anywhere is a [`WireError`], never a panic.
//!
//! ## Formulas (RFC 1071 one's-complement arithmetic, see [`checksum`])
//!
//! For segment `i` of `n` of a super-frame with headers `H` (Ethernet and tags,
//! IP, L4), L4 payload `P`, and per-segment payload `m = min(gso.size,
//! max_frame_bytes - |H|)`:
//!
//! - payload: `P[i*m .. min((i+1)*m, |P|)]`; `n = max(1, ceil(|P| / m))`;
//! - TCP (RFC 9293 §3.1): `seq = seq0 + i*m (mod 2^32)`; FIN and PSH kept only
//!   when `i = n-1`, CWR only when `i = 0` (as Linux's `tcp_gso_segment`); the
//!   ACK number, window, options and other flags copied;
//! - UDP (RFC 768): each segment its own datagram, `length = 8 + |payload|`;
//! - IPv4 (RFC 791): `total length = |IP header| + |L4|`, `id = id0 + i
//!   (mod 2^16)` (Linux TSO/GSO without FIXEDID), header checksum recomputed;
//!   IPv6 (RFC 8200): `payload length = |extension headers| + |L4|`;
//! - L4 checksum complete in every segment: `!fold(pseudo + sum(L4))`, the
//!   pseudo-header from the segment's own L4 length and, for IPv6 with a routing
//!   header, the final destination (RFC 8200 §8.1). UDP stores a computed 0 as
//!   0xffff. A UDP/IPv4 super-frame whose checksum field is 0 with no
//!   checksum-offload metadata was sent without checksum (RFC 768): its
//!   segments keep 0. Everything else gets a full checksum.
//!
//! Invariants: the segments' payloads concatenated equal `P`; every segment is
//! at most `max_frame_bytes` long and carries at most `gso.size` payload bytes;
//! the headers of segment `i` differ from `H` only in the fields above. Bytes
//! after the IP datagram (Ethernet padding) are not copied into segments.
//!
//! ## Why hand-written
//!
//! The header walk is small ([`headers`], ~200 lines) and sits on the per-frame
//! hot path, where we need byte offsets to patch fields in place, no
//! allocation, the pseudo-header's final destination behind an IPv6 routing
//! header, and exact control over what is refused. `etherparse` parses well,
//! but its zero-copy `SlicedPacket` took ~7x as long as [`locate`] on the same
//! 1500-byte frame in the same run (bench `wire`, group `locate-1500`), longer
//! than finishing the checksum itself, and gives slices rather than offsets to
//! patch. It is used instead in the tests, as the independent reference that
//! builds each expected segment from scratch, which it could not be if the
//! code under test used it.

mod bytes;
pub mod checksum;
pub mod coalesce;
pub mod gso;
pub mod headers;

pub use checksum::{complete_checksum, complete_partial_checksum};
pub use coalesce::{Coalescer, TcpSegment};
pub use gso::{segment, segment_plan, SegmentPlan, Segmenter};
pub use headers::{locate, Headers, IpVersion, L4Proto};

/// Offload metadata that came with a received frame (virtio_net_hdr semantics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offload {
    /// The L4 checksum was left for the hardware to finish (CHECKSUM_PARTIAL):
    /// the field at `start + offset` holds the folded pseudo-header sum; the one's
    /// complement of the sum of bytes `start..` must be stored there.
    pub csum: Option<CsumPartial>,
    /// A super-frame (TSO/GSO/USO, or merged by GRO) to be cut into wire frames.
    pub gso: Option<Gso>,
}

/// `struct virtio_net_hdr` (virtio 1.x §5.1.6, Linux `include/uapi/linux/virtio_net.h`),
/// as AF_PACKET with `PACKET_VNET_HDR` puts it before each frame: 10 bytes, the
/// 16-bit fields in host byte order (virtio legacy, which is what the kernel
/// uses for packet sockets).
pub const VIRTIO_NET_HDR_BYTES: usize = 10;

const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;
const VIRTIO_NET_HDR_GSO_TCPV4: u8 = 1;
const VIRTIO_NET_HDR_GSO_TCPV6: u8 = 4;
const VIRTIO_NET_HDR_GSO_UDP_L4: u8 = 5;
/// Set with TCP GSO when the super-frame carries CWR; segmentation keeps CWR
/// on the first segment only either way.
const VIRTIO_NET_HDR_GSO_ECN: u8 = 0x80;

impl Offload {
    /// Reads the offload metadata of a `virtio_net_hdr` (see
    /// [`VIRTIO_NET_HDR_BYTES`]): `flags` bit NEEDS_CSUM gives [`CsumPartial`]
    /// from `csum_start`/`csum_offset`; `gso_type` TCPV4, TCPV6 and UDP_L4 give
    /// [`Gso`] with `gso_size`. DATA_VALID and `hdr_len` need nothing. UFO
    /// (`gso_type` 3, IP fragmentation of UDP) and unknown types are errors.
    pub fn from_virtio_net_hdr(hdr: [u8; VIRTIO_NET_HDR_BYTES]) -> Result<Offload, WireError> {
        let field = |i: usize| u16::from_ne_bytes([hdr[i], hdr[i + 1]]);
        let (flags, gso_type) = (hdr[0], hdr[1]);
        let (gso_size, csum_start, csum_offset) = (field(4), field(6), field(8));
        let csum = (flags & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0).then_some(CsumPartial {
            start: csum_start,
            offset: csum_offset,
        });
        let kind = match gso_type & !VIRTIO_NET_HDR_GSO_ECN {
            VIRTIO_NET_HDR_GSO_NONE => None,
            VIRTIO_NET_HDR_GSO_TCPV4 => Some(GsoKind::TcpV4),
            VIRTIO_NET_HDR_GSO_TCPV6 => Some(GsoKind::TcpV6),
            VIRTIO_NET_HDR_GSO_UDP_L4 => Some(GsoKind::Udp),
            // Includes VIRTIO_NET_HDR_GSO_UDP (UFO), which Linux no longer produces.
            _ => return Err(WireError::UnsupportedGsoType { gso_type }),
        };
        Ok(Offload {
            csum,
            gso: kind.map(|kind| Gso {
                kind,
                size: gso_size,
            }),
        })
    }
}

impl Offload {
    /// The `virtio_net_hdr` that asks the kernel for this offload (the
    /// inverse of [`Offload::from_virtio_net_hdr`]), for a frame whose
    /// Ethernet, IP and L4 headers take `header_bytes` (`hdr_len`, a hint).
    pub fn to_virtio_net_hdr(&self, header_bytes: u16) -> [u8; VIRTIO_NET_HDR_BYTES] {
        let mut h = [0u8; VIRTIO_NET_HDR_BYTES];
        let mut put = |i: usize, v: u16| h[i..i + 2].copy_from_slice(&v.to_ne_bytes());
        if let Some(c) = self.csum {
            put(6, c.start);
            put(8, c.offset);
        }
        if let Some(g) = self.gso {
            put(2, header_bytes);
            put(4, g.size);
        }
        h[0] = if self.csum.is_some() {
            VIRTIO_NET_HDR_F_NEEDS_CSUM
        } else {
            0
        };
        h[1] = match self.gso.map(|g| g.kind) {
            None => VIRTIO_NET_HDR_GSO_NONE,
            Some(GsoKind::TcpV4) => VIRTIO_NET_HDR_GSO_TCPV4,
            Some(GsoKind::TcpV6) => VIRTIO_NET_HDR_GSO_TCPV6,
            Some(GsoKind::Udp) => VIRTIO_NET_HDR_GSO_UDP_L4,
        };
        h
    }
}

/// Where a partial checksum starts and where its field is (virtio-net
/// `csum_start`, `csum_offset`): bytes from the frame start, and from `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CsumPartial {
    /// Byte offset from the frame start where the checksummed bytes begin
    /// (the L4 header).
    pub start: u16,
    /// Byte offset of the 2-byte checksum field from `start`.
    pub offset: u16,
}

/// Segmentation request of a super-frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gso {
    /// Which protocol the super-frame carries, to be checked against its headers.
    pub kind: GsoKind,
    /// L4 payload bytes per segment (MSS for TCP)
    pub size: u16,
}

/// What a super-frame is (virtio-net `gso_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GsoKind {
    /// TSO/GSO of TCP over IPv4 (`VIRTIO_NET_HDR_GSO_TCPV4`).
    TcpV4,
    /// TSO/GSO of TCP over IPv6 (`VIRTIO_NET_HDR_GSO_TCPV6`).
    TcpV6,
    /// USO (UDP_L4): each segment its own UDP datagram
    Udp,
}

/// Why a frame could not be handled. Each variant names what is wrong.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// The checksum-offload metadata points outside the frame.
    #[error("checksum offload start {start} + offset {offset} lies outside the {frame_bytes}-byte frame")]
    ChecksumOutOfFrame {
        /// `csum_start`: byte offset from the frame start.
        start: u16,
        /// `csum_offset`: byte offset of the checksum field from `start`.
        offset: u16,
        /// Length of the frame.
        frame_bytes: usize,
    },
    /// A header or datagram runs past the end of the frame or of its enclosing
    /// datagram.
    #[error("{layer} truncated: needs {need_bytes} bytes, has {have_bytes}")]
    Truncated {
        /// What was being read, e.g. "IPv4 header" or "TCP header".
        layer: &'static str,
        /// End offset (from the frame start) the layer needs.
        need_bytes: usize,
        /// End offset available: the frame length or the enclosing datagram's end.
        have_bytes: usize,
    },
    /// More VLAN tags than [`headers::MAX_VLAN_TAGS`].
    #[error("more than {max} VLAN tags")]
    TooManyVlanTags {
        /// The limit, [`headers::MAX_VLAN_TAGS`].
        max: usize,
    },
    /// The ethertype after any VLAN tags is neither IPv4 nor IPv6.
    #[error("not IP: ethertype {ethertype:#06x}")]
    NotIp {
        /// The ethertype found.
        ethertype: u16,
    },
    /// The IP header's version field does not match the ethertype.
    #[error("ethertype {ethertype:#06x} with IP version {version}")]
    BadIpVersion {
        /// The ethertype (0x0800 or 0x86dd).
        ethertype: u16,
        /// The version nibble of the IP header.
        version: u8,
    },
    /// An IPv4 IHL or TCP data offset below the 20-byte minimum.
    #[error("{layer} header length {bytes} bytes is below the minimum")]
    BadHeaderLength {
        /// "IPv4" or "TCP".
        layer: &'static str,
        /// The header length the field declares.
        bytes: usize,
    },
    /// The IPv4 total length is shorter than the IPv4 header.
    #[error("IPv4 total length {declared_bytes} is shorter than its {header_bytes}-byte header")]
    BadIpLength {
        /// The total length field.
        declared_bytes: usize,
        /// The header length from IHL.
        header_bytes: usize,
    },
    /// An IPv6 jumbogram (RFC 2675), whose length is in a hop-by-hop option.
    #[error("IPv6 jumbogram (payload length 0 with hop-by-hop options) is not supported")]
    Jumbogram,
    /// An IPv4 or IPv6 fragment.
    #[error("IP fragment: its transport header and checksum span several frames")]
    Fragment,
    /// The transport protocol (after any IPv6 extension headers) is not TCP or UDP.
    #[error("IP protocol / next header {protocol} is neither TCP nor UDP")]
    UnsupportedProtocol {
        /// The IPv4 protocol or IPv6 next-header number found.
        protocol: u8,
    },
    /// An IPv6 routing header with segments left of a type other than 0, 2 or 4,
    /// or too short to hold the final destination the pseudo-header needs.
    #[error("IPv6 routing header type {routing_type} with segments left is not supported")]
    UnsupportedRoutingType {
        /// The routing type found.
        routing_type: u8,
    },
    /// The segmentation metadata names a protocol the frame does not carry.
    #[error("segmentation offload says {kind:?} but the frame is {found}")]
    GsoKindMismatch {
        /// The kind the metadata asked for.
        kind: GsoKind,
        /// What the frame is, from [`Headers::describe`].
        found: &'static str,
    },
    /// A virtio-net `gso_type` we do not segment (UFO or unknown).
    #[error("virtio-net gso_type {gso_type:#04x} is not supported (only TCPv4, TCPv6 and UDP_L4)")]
    UnsupportedGsoType {
        /// The `gso_type` byte, ECN bit included.
        gso_type: u8,
    },
    /// Segmentation was asked for with [`Gso::size`] 0.
    #[error("segmentation offload with segment size 0")]
    ZeroGsoSize,
    /// A plan of segments was asked for a frame without segmentation
    /// metadata ([`gso::segment_plan`]).
    #[error("the frame is not a super-frame: it has no segmentation offload")]
    NotSuperFrame,
    /// A frame without segmentation metadata is longer than the limit.
    #[error("{frame_bytes}-byte frame exceeds the {max_frame_bytes}-byte limit and is not a super-frame")]
    FrameTooBig {
        /// Length of the frame.
        frame_bytes: usize,
        /// The limit on wire frame length.
        max_frame_bytes: usize,
    },
    /// The headers alone fill the frame limit, leaving no room for payload.
    #[error("{header_bytes} bytes of headers leave no room for payload in {max_frame_bytes}-byte frames")]
    HeadersTooBig {
        /// Ethernet, tags, IP and L4 header bytes of the super-frame.
        header_bytes: usize,
        /// The limit on wire frame length.
        max_frame_bytes: usize,
    },
    /// The largest segment would not fit its 16-bit IPv4 total, IPv6 payload
    /// or UDP length field.
    #[error("segment of {bytes} bytes exceeds what the {layer} length field can hold")]
    LengthOverflow {
        /// "IPv4 total", "IPv6 payload" or "UDP".
        layer: &'static str,
        /// The length the field would have to hold.
        bytes: usize,
    },
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod virtio_tests {
    use super::*;

    fn hdr(flags: u8, gso_type: u8, gso_size: u16, start: u16, offset: u16) -> [u8; 10] {
        let mut h = [0u8; 10];
        h[0] = flags;
        h[1] = gso_type;
        h[2..4].copy_from_slice(&66u16.to_ne_bytes());
        h[4..6].copy_from_slice(&gso_size.to_ne_bytes());
        h[6..8].copy_from_slice(&start.to_ne_bytes());
        h[8..10].copy_from_slice(&offset.to_ne_bytes());
        h
    }

    #[test]
    fn virtio_net_hdr_fields_are_read() {
        assert_eq!(
            Offload::from_virtio_net_hdr([0; 10]),
            Ok(Offload::default())
        );
        // DATA_VALID only: nothing to do.
        assert_eq!(
            Offload::from_virtio_net_hdr(hdr(2, 0, 0, 34, 16)),
            Ok(Offload::default())
        );
        let tso = Offload::from_virtio_net_hdr(hdr(1, 1 | 0x80, 1448, 34, 16)).unwrap();
        assert_eq!(
            tso.csum,
            Some(CsumPartial {
                start: 34,
                offset: 16
            })
        );
        assert_eq!(
            tso.gso,
            Some(Gso {
                kind: GsoKind::TcpV4,
                size: 1448
            })
        );
        let tso6 = Offload::from_virtio_net_hdr(hdr(1, 4, 1428, 54, 16)).unwrap();
        assert_eq!(
            tso6.gso,
            Some(Gso {
                kind: GsoKind::TcpV6,
                size: 1428
            })
        );
        let uso = Offload::from_virtio_net_hdr(hdr(1, 5, 1200, 34, 6)).unwrap();
        assert_eq!(
            uso.gso,
            Some(Gso {
                kind: GsoKind::Udp,
                size: 1200
            })
        );
        assert_eq!(
            Offload::from_virtio_net_hdr(hdr(1, 3, 1200, 34, 6)),
            Err(WireError::UnsupportedGsoType { gso_type: 3 })
        );
        assert!(Offload::from_virtio_net_hdr(hdr(0, 9, 0, 0, 0)).is_err());
        // What linkem writes reads back the same.
        for o in [tso, tso6, uso, Offload::default()] {
            assert_eq!(Offload::from_virtio_net_hdr(o.to_virtio_net_hdr(66)), Ok(o));
        }
        assert_eq!(tso.to_virtio_net_hdr(66), hdr(1, 1, 1448, 34, 16));
    }
}

//! ECN marking on frame bytes (RFC 3168).
//!
//! # Reference
//! - The ECN field is the low two bits of the IPv4 TOS byte / the IPv6 traffic
//!   class: `00` not-ECT, `01` ECT(1), `10` ECT(0), `11` CE.
//! - An AQM that would drop an ECT packet sets CE instead; a not-ECT packet is
//!   dropped; a CE packet stays CE.
//! - IPv4's header checksum is updated incrementally (RFC 1624, eqn. 3):
//!   `HC' = ~(~HC + ~m + m')` over the 16-bit word `m` holding version/IHL and
//!   TOS, so a checksum that was right stays right and one that was wrong
//!   stays exactly as wrong. IPv6 has no header checksum.
//!
//! Frames are Ethernet (with up to two 802.1Q/802.1ad tags) or raw IP.

/// What [`mark_ce`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkResult {
    /// CE was set.
    Marked,
    /// The packet was CE already.
    AlreadyCe,
    /// Not-ECT: must be dropped instead.
    NotEct,
    /// Not an IP packet (or too short to be one).
    NotIp,
}

/// ECN codepoint `00`: the transport is not ECN-capable (an AQM drops it).
pub const NOT_ECT: u8 = 0;
/// ECN codepoint `11`: Congestion Experienced, set by [`mark_ce`].
pub const CE: u8 = 3;

/// Byte offset of the IP header in an Ethernet frame (None: not IP).
fn ip_offset_ether(frame: &[u8]) -> Option<usize> {
    let mut at = 12;
    loop {
        let t = u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]);
        match t {
            0x8100 | 0x88a8 => at += 4,
            0x0800 | 0x86dd => return Some(at + 2),
            _ => return None,
        }
    }
}

/// The ECN codepoint of a frame (0 when not IP). `raw_ip`: the frame starts
/// with the IP header (no link header).
pub fn codepoint(frame: &[u8], raw_ip: bool) -> u8 {
    let Some(at) = (if raw_ip {
        Some(0)
    } else {
        ip_offset_ether(frame)
    }) else {
        return NOT_ECT;
    };
    match frame.get(at).map(|b| b >> 4) {
        Some(4) => frame.get(at + 1).map_or(0, |tos| tos & 3),
        Some(6) => frame.get(at + 1).map_or(0, |b| (b >> 4) & 3),
        _ => NOT_ECT,
    }
}

/// Sets CE on an ECT packet in place.
pub fn mark_ce(frame: &mut [u8], raw_ip: bool) -> MarkResult {
    let Some(at) = (if raw_ip {
        Some(0)
    } else {
        ip_offset_ether(frame)
    }) else {
        return MarkResult::NotIp;
    };
    mark_ce_at(frame, at)
}

/// Sets CE on an ECT packet whose IP header starts at byte `at` (for link
/// headers other than Ethernet: Linux cooked capture, BSD loopback, raw IP).
pub fn mark_ce_at(frame: &mut [u8], at: usize) -> MarkResult {
    match frame.get(at).map(|b| b >> 4) {
        Some(4) if frame.len() >= at + 20 => {
            let ecn = frame[at + 1] & 3;
            match ecn {
                NOT_ECT => MarkResult::NotEct,
                CE => MarkResult::AlreadyCe,
                _ => {
                    let old = u16::from_be_bytes([frame[at], frame[at + 1]]);
                    frame[at + 1] |= CE;
                    let new = u16::from_be_bytes([frame[at], frame[at + 1]]);
                    let hc = u16::from_be_bytes([frame[at + 10], frame[at + 11]]);
                    let sum = (!hc as u32) + (!old as u32) + new as u32;
                    let sum = (sum & 0xffff) + (sum >> 16);
                    let sum = (sum & 0xffff) + (sum >> 16);
                    frame[at + 10..at + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
                    MarkResult::Marked
                }
            }
        }
        Some(6) if frame.len() >= at + 40 => match (frame[at + 1] >> 4) & 3 {
            NOT_ECT => MarkResult::NotEct,
            CE => MarkResult::AlreadyCe,
            _ => {
                frame[at + 1] |= CE << 4;
                MarkResult::Marked
            }
        },
        _ => MarkResult::NotIp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The full one's-complement header checksum, for checking the incremental one.
    fn full_checksum(h: &[u8]) -> u16 {
        let mut s = 0u32;
        for (i, c) in h.chunks(2).enumerate() {
            if i == 5 {
                continue;
            }
            s += u16::from_be_bytes([c[0], c[1]]) as u32;
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    fn v4(tos: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20];
        f[12] = 0x08;
        let h = &mut f[14..];
        h.copy_from_slice(&[
            0x45, tos, 0, 20, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        let c = full_checksum(h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        f
    }

    #[test]
    fn ipv4_marks_and_keeps_checksum_valid() {
        for tos in [0x01u8, 0x02, 0xb9, 0xfe] {
            let mut f = v4(tos);
            assert_eq!(mark_ce(&mut f, false), MarkResult::Marked);
            assert_eq!(f[15] & 3, 3);
            assert_eq!(f[15] >> 2, tos >> 2, "DSCP kept");
            let c = u16::from_be_bytes([f[24], f[25]]);
            assert_eq!(c, full_checksum(&f[14..]), "tos {tos:#x}");
            assert_eq!(codepoint(&f, false), CE);
        }
        let mut f = v4(0xb8);
        assert_eq!(mark_ce(&mut f, false), MarkResult::NotEct);
        assert_eq!(f, v4(0xb8));
        let mut f = v4(0x03);
        assert_eq!(mark_ce(&mut f, false), MarkResult::AlreadyCe);
    }

    #[test]
    fn ipv6_and_vlan_and_non_ip() {
        let mut f = vec![0u8; 18 + 40];
        f[12..14].copy_from_slice(&[0x81, 0x00]);
        f[16..18].copy_from_slice(&[0x86, 0xdd]);
        f[18] = 0x6b; // traffic class 0xb_ ...
        f[19] = 0x90 | 0x05; // TC low nibble 9 = 10|01 -> ECT(1)
        assert_eq!(codepoint(&f, false), 1);
        assert_eq!(mark_ce(&mut f, false), MarkResult::Marked);
        assert_eq!((f[19] >> 4) & 3, 3);
        assert_eq!(f[19] & 0x0f, 0x05, "flow label kept");
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(mark_ce(&mut arp, false), MarkResult::NotIp);
        assert_eq!(mark_ce(&mut [0x45u8, 1], true), MarkResult::NotIp);
    }
}

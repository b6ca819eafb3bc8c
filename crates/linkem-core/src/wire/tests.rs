//! Property tests of checksum completion and segmentation against an
//! independent reference.
//!
//! The reference builds every expected frame from scratch from the flow's
//! fields (addresses, ports, IDs, sequence numbers, flags, payload slice):
//! headers serialised by `etherparse`, lengths from the payload, and every
//! checksum by a word-by-word loop written from RFC 1071 §4.1 over the
//! pseudo-headers of RFC 9293 §3.1 / RFC 768 (IPv4) and RFC 8200 §8.1 (IPv6).
//! Nothing in it comes from the code under test.

use super::*;
use crate::rules::{FlowKey, L2Kind};
use etherparse::{
    EtherType, Ethernet2Header, IpDscp, IpEcn, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header,
    Ipv6RawExtHeader, SingleVlanHeader, TcpHeader, UdpHeader, VlanId, VlanPcp,
};
use proptest::prelude::*;

/// RFC 1071 §4.1, one 16-bit word at a time.
fn naive_sum(parts: &[&[u8]]) -> u16 {
    let mut bytes = Vec::new();
    for p in parts {
        bytes.extend_from_slice(p);
    }
    let mut s: u32 = 0;
    for w in bytes.chunks(2) {
        s += (u32::from(w[0]) << 8) | u32::from(*w.get(1).unwrap_or(&0));
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

#[derive(Clone, Debug)]
enum Ip {
    V4 {
        src: [u8; 4],
        dst: [u8; 4],
        id: u16,
        ttl: u8,
        tos: u8,
        df: bool,
        options: Vec<u8>,
    },
    /// `exts`: (next-header number of the extension, its raw payload);
    /// `home`: a type 2 routing header (RFC 6275) with this final destination.
    V6 {
        src: [u8; 16],
        dst: [u8; 16],
        tc: u8,
        flow: u32,
        hop: u8,
        exts: Vec<(u8, Vec<u8>)>,
        home: Option<[u8; 16]>,
    },
}

#[derive(Clone, Debug)]
enum L4 {
    Tcp {
        sport: u16,
        dport: u16,
        seq: u32,
        ack: u32,
        flags: u8,
        window: u16,
        urg: u16,
        options: Vec<u8>,
    },
    /// `no_checksum`: sent without checksum (only meaningful over IPv4).
    Udp {
        sport: u16,
        dport: u16,
        no_checksum: bool,
    },
}

#[derive(Clone, Debug)]
struct Flow {
    macs: ([u8; 6], [u8; 6]),
    /// (TPID, TCI) outermost first.
    vlans: Vec<(u16, u16)>,
    ip: Ip,
    l4: L4,
}

impl Flow {
    fn pseudo(&self, l4_len: usize) -> Vec<u8> {
        let proto = match self.l4 {
            L4::Tcp { .. } => 6u8,
            L4::Udp { .. } => 17,
        };
        let mut p = Vec::new();
        match &self.ip {
            // RFC 9293 §3.1: src, dst, zero, PTCL, TCP length.
            Ip::V4 { src, dst, .. } => {
                p.extend_from_slice(src);
                p.extend_from_slice(dst);
                p.extend_from_slice(&[0, proto]);
                p.extend_from_slice(&(l4_len as u16).to_be_bytes());
            }
            // RFC 8200 §8.1: src, final dst, 32-bit length, 3 zero bytes, next header.
            Ip::V6 { src, dst, home, .. } => {
                p.extend_from_slice(src);
                p.extend_from_slice(home.as_ref().unwrap_or(dst));
                p.extend_from_slice(&(l4_len as u32).to_be_bytes());
                p.extend_from_slice(&[0, 0, 0, proto]);
            }
        }
        p
    }

    /// The TCP or UDP header and payload, checksum right.
    fn l4_bytes(&self, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut l4 = Vec::new();
        match &self.l4 {
            L4::Tcp {
                sport,
                dport,
                ack,
                window,
                urg,
                options,
                ..
            } => {
                let mut t = TcpHeader::new(*sport, *dport, seq, *window);
                t.acknowledgment_number = *ack;
                t.fin = flags & 0x01 != 0;
                t.syn = flags & 0x02 != 0;
                t.rst = flags & 0x04 != 0;
                t.psh = flags & 0x08 != 0;
                t.ack = flags & 0x10 != 0;
                t.urg = flags & 0x20 != 0;
                t.ece = flags & 0x40 != 0;
                t.cwr = flags & 0x80 != 0;
                t.urgent_pointer = *urg;
                t.set_options_raw(options).unwrap();
                t.write(&mut l4).unwrap();
                l4.extend_from_slice(payload);
                let c = !naive_sum(&[&self.pseudo(l4.len()), &l4]);
                l4[16..18].copy_from_slice(&c.to_be_bytes());
            }
            L4::Udp {
                sport,
                dport,
                no_checksum,
            } => {
                let u = UdpHeader {
                    source_port: *sport,
                    destination_port: *dport,
                    length: (8 + payload.len()) as u16,
                    checksum: 0,
                };
                u.write(&mut l4).unwrap();
                l4.extend_from_slice(payload);
                let v4 = matches!(self.ip, Ip::V4 { .. });
                if !(*no_checksum && v4) {
                    // RFC 768: a computed 0 is transmitted as all ones.
                    let c = match !naive_sum(&[&self.pseudo(l4.len()), &l4]) {
                        0 => 0xffff,
                        c => c,
                    };
                    l4[6..8].copy_from_slice(&c.to_be_bytes());
                }
            }
        }
        l4
    }

    /// The IP header (and IPv6 extension headers) over `l4_len` bytes, and its EtherType.
    fn l3_bytes(&self, id: u16, l4_len: usize) -> (Vec<u8>, EtherType) {
        let proto = match self.l4 {
            L4::Tcp { .. } => IpNumber::TCP,
            L4::Udp { .. } => IpNumber::UDP,
        };
        let mut l3 = Vec::new();
        let ethertype = match &self.ip {
            Ip::V4 {
                src,
                dst,
                ttl,
                tos,
                df,
                options,
                ..
            } => {
                let mut h = Ipv4Header::new(0, *ttl, proto, *src, *dst).unwrap();
                h.dscp = IpDscp::try_new(tos >> 2).unwrap();
                h.ecn = IpEcn::try_new(tos & 3).unwrap();
                h.identification = id;
                h.dont_fragment = *df;
                h.options = options.as_slice().try_into().unwrap();
                h.set_payload_len(l4_len).unwrap();
                h.header_checksum = 0;
                let mut raw = Vec::new();
                h.write_raw(&mut raw).unwrap();
                // RFC 791 §3.1: the complement of the sum of the header's words.
                let c = !naive_sum(&[&raw]);
                raw[10..12].copy_from_slice(&c.to_be_bytes());
                assert_eq!(
                    c,
                    h.calc_header_checksum(),
                    "reference checksum loops disagree"
                );
                l3.extend_from_slice(&raw);
                EtherType::IPV4
            }
            Ip::V6 {
                src,
                dst,
                tc,
                flow,
                hop,
                exts,
                home,
            } => {
                let mut chain: Vec<(u8, Vec<u8>)> = exts.clone();
                if let Some(home) = home {
                    let mut rh = vec![2u8, 1, 0, 0, 0, 0];
                    rh.extend_from_slice(home);
                    chain.push((43, rh));
                }
                let mut ext_bytes = Vec::new();
                for (k, (_, body)) in chain.iter().enumerate() {
                    let next = chain.get(k + 1).map_or(proto, |(n, _)| IpNumber(*n));
                    Ipv6RawExtHeader::new_raw(next, body)
                        .unwrap()
                        .write(&mut ext_bytes)
                        .unwrap();
                }
                let first = chain.first().map_or(proto, |(n, _)| IpNumber(*n));
                let mut h = Ipv6Header {
                    traffic_class: *tc,
                    flow_label: Ipv6FlowLabel::try_new(*flow).unwrap(),
                    payload_length: 0,
                    next_header: first,
                    hop_limit: *hop,
                    source: *src,
                    destination: *dst,
                };
                h.set_payload_length(ext_bytes.len() + l4_len).unwrap();
                h.write(&mut l3).unwrap();
                l3.extend_from_slice(&ext_bytes);
                EtherType::IPV6
            }
        };
        (l3, ethertype)
    }

    /// The frame for these fields, every length and checksum right. `seq`,
    /// `id`, `flags` override the flow's.
    fn build(&self, seq: u32, id: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
        let l4 = self.l4_bytes(seq, flags, payload);
        let (l3, ethertype) = self.l3_bytes(id, l4.len());
        let mut frame = Vec::new();
        let first_type = self
            .vlans
            .first()
            .map_or(ethertype, |(tpid, _)| EtherType(*tpid));
        Ethernet2Header {
            destination: self.macs.0,
            source: self.macs.1,
            ether_type: first_type,
        }
        .write(&mut frame)
        .unwrap();
        for (k, (_, tci)) in self.vlans.iter().enumerate() {
            let next = self
                .vlans
                .get(k + 1)
                .map_or(ethertype, |(tpid, _)| EtherType(*tpid));
            SingleVlanHeader {
                pcp: VlanPcp::try_new((tci >> 13) as u8).unwrap(),
                drop_eligible_indicator: tci & 0x1000 != 0,
                vlan_id: VlanId::try_new(tci & 0x0fff).unwrap(),
                ether_type: next,
            }
            .write(&mut frame)
            .unwrap();
        }
        frame.extend_from_slice(&l3);
        frame.extend_from_slice(&l4);
        frame
    }

    fn seq_id_flags(&self) -> (u32, u16, u8) {
        let id = match self.ip {
            Ip::V4 { id, .. } => id,
            Ip::V6 { .. } => 0,
        };
        match self.l4 {
            L4::Tcp { seq, flags, .. } => (seq, id, flags),
            L4::Udp { .. } => (0, id, 0),
        }
    }

    fn header_bytes(&self) -> usize {
        self.build(0, 0, 0, &[]).len()
    }

    fn l4_offset(&self) -> usize {
        let l4_header = match &self.l4 {
            L4::Tcp { options, .. } => 20 + options.len(),
            L4::Udp { .. } => 8,
        };
        self.header_bytes() - l4_header
    }

    fn checksum_field(&self) -> usize {
        self.l4_offset()
            + match self.l4 {
                L4::Tcp { .. } => 16,
                L4::Udp { .. } => 6,
            }
    }

    fn gso_kind(&self) -> GsoKind {
        match (&self.ip, &self.l4) {
            (_, L4::Udp { .. }) => GsoKind::Udp,
            (Ip::V4 { .. }, _) => GsoKind::TcpV4,
            (Ip::V6 { .. }, _) => GsoKind::TcpV6,
        }
    }

    /// What the sender's stack leaves with CHECKSUM_PARTIAL: the folded
    /// pseudo-header sum in the field, and where it is.
    fn partial(&self, frame: &mut [u8]) -> CsumPartial {
        let l4 = self.l4_offset();
        let field = self.checksum_field();
        let p = naive_sum(&[&self.pseudo(frame.len() - l4)]);
        frame[field..field + 2].copy_from_slice(&p.to_be_bytes());
        CsumPartial {
            start: l4 as u16,
            offset: (field - l4) as u16,
        }
    }

    /// The segments the wire would carry, built from scratch.
    fn expected_segments(
        &self,
        payload: &[u8],
        size: usize,
        max_frame_bytes: usize,
    ) -> Vec<Vec<u8>> {
        let (seq0, id0, flags) = self.seq_id_flags();
        let m = size.min(max_frame_bytes - self.header_bytes());
        let chunks: Vec<&[u8]> = if payload.is_empty() {
            vec![&[]]
        } else {
            payload.chunks(m).collect()
        };
        let n = chunks.len();
        chunks
            .iter()
            .enumerate()
            .map(|(i, chunk)| {
                let mut f = flags;
                if i + 1 < n {
                    f &= !0x09; // FIN, PSH: the last segment only (RFC 9293 §3.10.4 ends the stream there)
                }
                if i > 0 {
                    f &= !0x80; // CWR: the first segment only (RFC 3168 §6.1.2)
                }
                self.build(
                    seq0.wrapping_add((i * m) as u32),
                    id0.wrapping_add(i as u16),
                    f,
                    chunk,
                )
            })
            .collect()
    }
}

fn arb_ip() -> impl Strategy<Value = Ip> {
    let v4 = (
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        any::<u16>(),
        any::<u8>(),
        any::<u8>(),
        any::<bool>(),
        (0usize..=10).prop_flat_map(|w| proptest::collection::vec(any::<u8>(), w * 4)),
    )
        .prop_map(|(src, dst, id, ttl, tos, df, options)| Ip::V4 {
            src,
            dst,
            id,
            ttl,
            tos,
            df,
            options,
        });
    let ext = (prop_oneof![Just(0u8), Just(60u8)], (0usize..3)).prop_flat_map(|(kind, k)| {
        (
            Just(kind),
            proptest::collection::vec(any::<u8>(), 6 + 8 * k),
        )
    });
    let v6 = (
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<u8>(),
        0u32..(1 << 20),
        any::<u8>(),
        proptest::collection::vec(ext, 0..3),
        proptest::option::of(any::<[u8; 16]>()),
    )
        .prop_map(|(src, dst, tc, flow, hop, mut exts, home)| {
            // Hop-by-hop options may only come first (RFC 8200 §4.1).
            for (k, e) in exts.iter_mut().enumerate() {
                if k > 0 {
                    e.0 = 60;
                }
            }
            Ip::V6 {
                src,
                dst,
                tc,
                flow,
                hop,
                exts,
                home,
            }
        });
    prop_oneof![v4, v6]
}

fn arb_l4() -> impl Strategy<Value = L4> {
    let tcp = (
        any::<u16>(),
        any::<u16>(),
        any::<u32>(),
        any::<u32>(),
        any::<u8>(),
        any::<u16>(),
        any::<u16>(),
        (0usize..=10).prop_flat_map(|w| proptest::collection::vec(any::<u8>(), w * 4)),
    )
        .prop_map(
            |(sport, dport, seq, ack, flags, window, urg, options)| L4::Tcp {
                sport,
                dport,
                seq,
                ack,
                flags,
                window,
                urg,
                options,
            },
        );
    let udp =
        (any::<u16>(), any::<u16>(), any::<bool>()).prop_map(|(sport, dport, no_checksum)| {
            L4::Udp {
                sport,
                dport,
                no_checksum,
            }
        });
    prop_oneof![tcp, udp]
}

fn arb_flow() -> impl Strategy<Value = Flow> {
    let vlans = proptest::collection::vec(
        (
            prop_oneof![Just(0x8100u16), Just(0x88a8), Just(0x9100)],
            any::<u16>(),
        ),
        0..=2,
    );
    (any::<([u8; 6], [u8; 6])>(), vlans, arb_ip(), arb_l4()).prop_map(|(macs, vlans, ip, l4)| {
        Flow {
            macs,
            vlans,
            ip,
            l4,
        }
    })
}

/// Whether the L4 checksum of a built frame verifies (RFC 1071: sums to all ones).
fn verifies(flow: &Flow, frame: &[u8]) -> bool {
    let l4 = &frame[flow.l4_offset()..];
    naive_sum(&[&flow.pseudo(l4.len()), l4]) == 0xffff
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn segments_equal_the_reference(
        flow in arb_flow(),
        payload in proptest::collection::vec(any::<u8>(), 0..12_000),
        size in 1usize..4000,
        room in prop_oneof![Just(usize::MAX / 2), 1usize..4200],
        partial in any::<bool>(),
    ) {
        let (seq0, id0, flags) = flow.seq_id_flags();
        let mut frame = flow.build(seq0, id0, flags, &payload);
        let header_bytes = flow.header_bytes();
        let max_frame_bytes = header_bytes.saturating_add(room);
        let no_checksum = matches!((&flow.ip, &flow.l4), (Ip::V4 { .. }, L4::Udp { no_checksum: true, .. }));
        let csum = (partial && !no_checksum).then(|| flow.partial(&mut frame));
        if csum.is_none() && !no_checksum {
            // GRO-merged frames carry a checksum that may be stale: ignored.
            let field = flow.checksum_field();
            frame[field] ^= 0x5a;
        }
        let offload = Offload { csum, gso: Some(Gso { kind: flow.gso_kind(), size: size as u16 }) };
        let mut got = Vec::new();
        let n = segment(&frame, offload, max_frame_bytes, &mut |s| got.push(s.to_vec())).unwrap();
        let want = flow.expected_segments(&payload, size, max_frame_bytes);
        prop_assert_eq!(n, got.len());
        prop_assert_eq!(got.len(), want.len());
        let mut joined = Vec::new();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            prop_assert!(g == w, "segment {} of {}:\n got {:02x?}\nwant {:02x?}", i, n, g, w);
            prop_assert!(g.len() <= max_frame_bytes);
            prop_assert!(g.len() - header_bytes <= size);
            prop_assert!(no_checksum || verifies(&flow, g));
            joined.extend_from_slice(&g[header_bytes..]);
        }
        prop_assert_eq!(joined, payload);
    }

    #[test]
    fn a_plan_gives_the_lengths_of_the_reference_segments_and_of_segment(
        flow in arb_flow(),
        payload in proptest::collection::vec(any::<u8>(), 0..60_000),
        size in 0usize..9000,
        room in prop_oneof![Just(usize::MAX / 2), 0usize..9200],
        pad in 0usize..4,
        kind in proptest::option::of(prop_oneof![Just(GsoKind::TcpV4), Just(GsoKind::TcpV6), Just(GsoKind::Udp)]),
    ) {
        let (seq0, id0, flags) = flow.seq_id_flags();
        let mut frame = flow.build(seq0, id0, flags, &payload);
        // Ethernet padding after the datagram is in no segment.
        frame.extend(std::iter::repeat_n(0u8, pad));
        let header_bytes = flow.header_bytes();
        let max_frame_bytes = header_bytes.saturating_add(room);
        let offload = Offload {
            csum: None,
            gso: Some(Gso { kind: kind.unwrap_or(flow.gso_kind()), size: size as u16 }),
        };
        let plan = segment_plan(&frame, offload, max_frame_bytes);
        let mut cut = Vec::new();
        let segmented = segment(&frame, offload, max_frame_bytes, &mut |s| cut.push(s.len()));
        match (&plan, &segmented) {
            (Ok(plan), Ok(n)) => {
                let lengths: Vec<usize> = plan.lengths().collect();
                prop_assert_eq!(&lengths, &cut, "the plan against segment");
                prop_assert_eq!(plan.segments, *n);
                // The reference is built only where its length fields hold.
                if size > 0 && room > 0 && payload.len() + header_bytes < 65_000 {
                    let want: Vec<usize> = flow
                        .expected_segments(&payload, size, max_frame_bytes)
                        .iter()
                        .map(Vec::len)
                        .collect();
                    prop_assert_eq!(&lengths, &want, "the plan against the reference");
                }
                prop_assert_eq!(plan.trailer_bytes, pad);
                prop_assert_eq!(plan.header_bytes, header_bytes);
                prop_assert_eq!(plan.l4_offset, flow.l4_offset());
                // Each segment's key, derived without cutting, is the key
                // read from the segment `segment` cut.
                let whole = FlowKey::parse(&frame, L2Kind::Ethernet);
                let mut i = 0;
                let mut keys = Ok(());
                let _ = segment(&frame, offload, max_frame_bytes, &mut |s| {
                    let (got, want) = (whole.of_segment(plan, i), FlowKey::parse(s, L2Kind::Ethernet));
                    if keys.is_ok() && got != want {
                        keys = Err(format!("segment {i} of {n}: derived {got:?}, read {want:?}"));
                    }
                    i += 1;
                });
                prop_assert!(keys.is_ok(), "{}", keys.unwrap_err());
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "plan {:?}, segment {:?}", a, b),
        }
    }

    #[test]
    fn partial_checksums_are_finished_and_wrong_ones_kept(
        flow in arb_flow(),
        payload in proptest::collection::vec(any::<u8>(), 0..3000),
        flip in any::<proptest::sample::Index>(),
        pad in 0usize..8,
    ) {
        prop_assume!(!matches!(flow.l4, L4::Udp { no_checksum: true, .. }));
        let (seq0, id0, flags) = flow.seq_id_flags();
        let mut right = flow.build(seq0, id0, flags, &payload);
        let field = flow.checksum_field();
        // A TCP checksum that computes to 0 is stored as 0xffff by the finisher, as
        // Linux's skb_checksum_help stores it: the same value in one's complement.
        if right[field..field + 2] == [0, 0] {
            right[field..field + 2].copy_from_slice(&[0xff, 0xff]);
        }

        // Left for offload: finished, with or without metadata, to the reference bytes.
        let mut partial = right.clone();
        let csum = flow.partial(&mut partial);
        let mut with_meta = partial.clone();
        complete_checksum(&mut with_meta, csum).unwrap();
        prop_assert_eq!(&with_meta, &right);
        let mut without_meta = partial.clone();
        // Ethernet padding after the datagram is not summed.
        without_meta.extend(std::iter::repeat_n(0xa5, pad));
        let finished = complete_partial_checksum(&mut without_meta);
        let mut padded_right = right.clone();
        padded_right.extend(std::iter::repeat_n(0xa5, pad));
        // A right checksum may equal the pseudo sum by chance (then nothing to do).
        prop_assert_eq!(finished, partial != right);
        prop_assert_eq!(&without_meta, &padded_right);

        // Right: untouched.
        let mut same = right.clone();
        prop_assert!(!complete_partial_checksum(&mut same));
        prop_assert_eq!(&same, &right);

        // Wrong (a flipped bit after the checksum field): never repaired, unless its
        // field happens to hold the pseudo-header sum (the documented 1-in-65535 case).
        // An empty UDP datagram ends with its checksum field: flip its source port.
        let mut wrong = right.clone();
        let after = wrong.len() - field - 2;
        let at = if after > 0 { field + 2 + flip.index(after) } else { field - 6 };
        wrong[at] ^= 0x10;
        prop_assume!(wrong[field..field + 2] != partial[field..field + 2]);
        let before = wrong.clone();
        prop_assert!(!complete_partial_checksum(&mut wrong));
        prop_assert_eq!(wrong, before);
    }

    #[test]
    fn frames_without_gso_pass_unchanged(
        flow in arb_flow(),
        payload in proptest::collection::vec(any::<u8>(), 0..3000),
        partial in any::<bool>(),
    ) {
        prop_assume!(!matches!(flow.l4, L4::Udp { no_checksum: true, .. }));
        let (seq0, id0, flags) = flow.seq_id_flags();
        let right = flow.build(seq0, id0, flags, &payload);
        let mut frame = right.clone();
        let csum = partial.then(|| flow.partial(&mut frame));
        let mut got = Vec::new();
        let n = segment(&frame, Offload { csum, gso: None }, right.len(), &mut |s| got.push(s.to_vec())).unwrap();
        prop_assert_eq!(n, 1);
        prop_assert_eq!(&got[0], &right);
        let too_small = segment(&frame, Offload { csum, gso: None }, right.len() - 1, &mut |_| ());
        prop_assert!(matches!(too_small, Err(WireError::FrameTooBig { .. })), "{:?}", too_small);
    }

    #[test]
    fn arbitrary_bytes_and_metadata_never_panic(
        mut frame in proptest::collection::vec(any::<u8>(), 0..200),
        start in any::<u16>(),
        offset in any::<u16>(),
        size in any::<u16>(),
        kind in 0u8..3,
        max in 0usize..300,
    ) {
        let csum = CsumPartial { start, offset };
        let kind = [GsoKind::TcpV4, GsoKind::TcpV6, GsoKind::Udp][usize::from(kind)];
        let _ = complete_checksum(&mut frame.clone(), csum);
        let _ = complete_partial_checksum(&mut frame);
        let mut total = 0;
        let r = segment(&frame, Offload { csum: Some(csum), gso: Some(Gso { kind, size }) }, max, &mut |s| {
            total += 1;
            assert!(s.len() <= max);
        });
        if let Ok(n) = r {
            prop_assert_eq!(n, total);
        }
    }
}

/// A ~ fully valid frame mutated at every position and cut at every length:
/// errors only, no panics, and segments within bounds.
#[test]
fn truncated_and_mutated_frames_are_errors_not_panics() {
    let flow = Flow {
        macs: ([2; 6], [4; 6]),
        vlans: vec![(0x88a8, 7), (0x8100, 9)],
        ip: Ip::V6 {
            src: [1; 16],
            dst: [2; 16],
            tc: 0,
            flow: 0,
            hop: 64,
            exts: vec![(0, vec![1, 4, 0, 0, 0, 0])],
            home: Some([3; 16]),
        },
        l4: L4::Tcp {
            sport: 1,
            dport: 2,
            seq: 3,
            ack: 4,
            flags: 0x19,
            window: 5,
            urg: 0,
            options: vec![1, 1, 1, 0],
        },
    };
    let frame = flow.build(3, 0, 0x19, &[7; 300]);
    let gso = Some(Gso {
        kind: GsoKind::TcpV6,
        size: 100,
    });
    for cut in 0..frame.len() {
        let r = segment(
            &frame[..cut],
            Offload { csum: None, gso },
            1500,
            &mut |_| (),
        );
        assert!(r.is_err(), "cut at {cut}: {r:?}");
        assert!(!complete_partial_checksum(&mut frame[..cut].to_vec()));
    }
    for at in 0..frame.len() {
        for bit in 0..8 {
            let mut f = frame.clone();
            f[at] ^= 1 << bit;
            let _ = segment(&f, Offload { csum: None, gso }, 1500, &mut |s| {
                assert!(s.len() <= 1500)
            });
            let _ = complete_partial_checksum(&mut f);
        }
    }
}

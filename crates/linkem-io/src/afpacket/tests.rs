use super::*;
use ring::MAX_BLOCK_SIZE;
use rx::shift_offload;

#[test]
fn header_offsets_match_the_kernel() {
    assert_eq!(TPACKET2_HDR_SIZE, 32);
    assert_eq!(TPACKET2_HDRLEN, 52);
    // TPACKET_ALIGN(52 + 16) = 80, + 10 for the virtio-net header, − 14 for Ethernet.
    assert_eq!(RX_MAC_OFFSET, 76);
    assert_eq!(TX_DATA_OFFSET, 32);
}

#[test]
fn geometry_default_is_whole_blocks() {
    let g = RingGeometry::compute(2048, 4096, 4096).unwrap();
    assert_eq!(g.block_size as usize % 4096, 0);
    assert_eq!(g.block_size % g.frame_size, 0);
    assert!(g.block_size as usize <= MAX_BLOCK_SIZE);
    assert_eq!(g.frame_nr, g.block_nr * g.frames_per_block());
    assert!(g.frame_nr >= 4096);
    assert_eq!(g.total_bytes(), 4096 * 2048);
    assert_eq!(g.frame_offset(0), 0);
    assert_eq!(g.frame_offset(1), 2048);
    assert_eq!(g.frame_offset(g.frame_nr - 1), g.total_bytes() - 2048);
    assert_eq!(g.rx_capacity(), 2048 - 76);
    assert_eq!(g.tx_capacity(), 2048 - 32);
}

#[test]
fn geometry_rounds_up_and_handles_odd_frames() {
    // 3 frames of 2048 in 4 KiB pages: the ring needs 2 pages, one 8 KiB block of 4 frames.
    let g = RingGeometry::compute(2048, 3, 4096).unwrap();
    assert_eq!((g.block_size, g.block_nr, g.frame_nr), (8192, 1, 4));
    // A frame size that does not divide the block: frames never straddle blocks.
    let g = RingGeometry::compute(1536, 10, 4096).unwrap();
    assert_eq!(g.frame_nr, g.block_nr * g.frames_per_block());
    assert!(g.frame_nr >= 10);
    for i in 0..g.frame_nr {
        let off = g.frame_offset(i);
        let block_end = (off / g.block_size as usize + 1) * g.block_size as usize;
        assert!(off + 1536 <= block_end, "frame {i} straddles a block");
    }
    // Jumbo frames: a block spans several pages.
    let g = RingGeometry::compute(9216 + 128, 64, 4096).unwrap();
    assert_eq!(g.block_size as usize % 4096, 0);
    assert!(g.block_size >= g.frame_size);
}

#[test]
fn geometry_rejects_bad_sizes() {
    assert!(RingGeometry::compute(2047, 16, 4096).is_err());
    assert!(RingGeometry::compute(48, 16, 4096).is_err());
    assert!(RingGeometry::compute(2048, 0, 4096).is_err());
    let e = RingGeometry::compute(2050, 16, 4096)
        .unwrap_err()
        .to_string();
    assert!(e.contains("frame size 2050"), "{e}");
}

#[test]
fn mtu_check_and_message() {
    check_mtu("veth0", 1500, 2048).unwrap();
    assert!(frame_size_for_mtu(1500) <= 2048);
    let e = check_mtu("x", 9000, 2048).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("MTU 9000 of 'x' exceeds the 2048-byte ring frame; raise --frame-size"),
        "{msg}"
    );
    let needed = frame_size_for_mtu(9000);
    assert!(msg.contains(&needed.to_string()));
    check_mtu("x", 9000, needed).unwrap();
    assert!(check_mtu("x", 9000, needed - 16).is_err());
}

#[test]
fn error_messages_name_call_and_interface() {
    let e = IoError::sys(
        "socket(AF_PACKET, SOCK_RAW)",
        "eth9",
        io::Error::from_raw_os_error(libc::EPERM),
    );
    assert_eq!(
        e.to_string(),
        "socket(AF_PACKET, SOCK_RAW) on 'eth9': needs root or CAP_NET_RAW"
    );
    let e = IoError::sys(
        "bind(AF_PACKET)",
        "eth9",
        io::Error::from_raw_os_error(libc::ENETDOWN),
    );
    let m = e.to_string();
    assert!(m.starts_with("bind(AF_PACKET) on 'eth9' failed:"), "{m}");
    assert_eq!(
        IoError::NoSuchInterface { ifname: "x".into() }.to_string(),
        "interface 'x' does not exist"
    );
    assert!(IoError::InterfaceDown { ifname: "x".into() }
        .to_string()
        .starts_with("interface 'x' is down"));
}

#[test]
fn open_missing_interface_fails_clearly() {
    let e = AfPacket::open("nosuchif0zz", AfPacketConfig::default()).unwrap_err();
    assert_eq!(e.to_string(), "interface 'nosuchif0zz' does not exist");
    let e = AfPacket::open("this-name-is-way-too-long", AfPacketConfig::default()).unwrap_err();
    assert!(e.to_string().contains("does not exist"));
}

#[test]
fn open_loopback_works_or_needs_root() {
    // lo always exists and is up; as non-root this must be the plain permission error.
    match AfPacket::open("lo", AfPacketConfig::default()) {
        Ok(_) => {}
        Err(IoError::PermissionDenied { call, ifname }) => {
            assert_eq!(ifname, "lo");
            assert!(call.starts_with("socket"));
        }
        // lo's MTU is 65536: with the default frame size that is the expected refusal.
        Err(IoError::MtuTooLarge { mtu, .. }) => assert!(mtu > 1964),
        Err(e) => panic!("unexpected error: {e}"),
    }
}

#[test]
fn virtio_net_headers_as_the_kernel_writes_them() {
    // NEEDS_CSUM, TCPV4 with ECN, hdr_len 66, gso_size 1448, csum_start 34, offset 16.
    let h = [1, 0x81, 66, 0, 0xa8, 0x05, 34, 0, 16, 0];
    assert_eq!(
        parse_vnet_hdr(&h),
        Offload {
            csum: Some(CsumPartial {
                start: 34,
                offset: 16
            }),
            gso: Some(Gso {
                kind: GsoKind::TcpV4,
                size: 1448
            }),
        }
    );
    let h = [0, 4, 0, 0, 0x8c, 0x05, 0, 0, 0, 0];
    assert_eq!(parse_vnet_hdr(&h).gso.unwrap().kind, GsoKind::TcpV6);
    let h = [1, 5, 0, 0, 0xb4, 0x05, 34, 0, 6, 0];
    let o = parse_vnet_hdr(&h);
    assert_eq!(
        (o.gso.unwrap().kind, o.csum.unwrap().offset),
        (GsoKind::Udp, 6)
    );
    // DATA_VALID only, no GSO: nothing to do.
    assert_eq!(
        parse_vnet_hdr(&[2, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        Offload::default()
    );
    // Legacy UFO (3) and a zero segment size cannot be cut: judged by length alone.
    assert_eq!(
        parse_vnet_hdr(&[0, 3, 0, 0, 0xdc, 0x05, 0, 0, 0, 0]).gso,
        None
    );
    assert_eq!(parse_vnet_hdr(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 0]).gso, None);
    // A VLAN tag written back moves the checksum start, not its offset.
    let moved = shift_offload(parse_vnet_hdr(&[1, 0, 0, 0, 0, 0, 34, 0, 16, 0]), 4);
    assert_eq!(
        moved.csum,
        Some(CsumPartial {
            start: 38,
            offset: 16
        })
    );
}

#[test]
fn clocks_are_consistent() {
    let off = ClockOffset::measure();
    let r = now_realtime_ns();
    let m = now_monotonic_ns();
    let conv = off.to_monotonic(r);
    assert!(conv.abs_diff(m) < 10_000_000, "conv {conv} mono {m}");
}

//! Reader and writer tests on captures built byte by byte.

use super::*;

/// A classic pcap: records are (seconds, fraction, captured bytes, original length).
fn pcap(
    big_endian: bool,
    nanos: bool,
    link_type: u32,
    records: &[(u32, u32, &[u8], u32)],
) -> Vec<u8> {
    let u32b = |v: u32| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let u16b = |v: u16| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let mut out = Vec::new();
    out.extend(u32b(if nanos {
        PCAP_MAGIC_NANOS
    } else {
        PCAP_MAGIC_MICROS
    }));
    out.extend(u16b(2));
    out.extend(u16b(4));
    out.extend(u32b(0));
    out.extend(u32b(0));
    out.extend(u32b(65535));
    out.extend(u32b(link_type));
    for &(sec, frac, data, orig) in records {
        out.extend(u32b(sec));
        out.extend(u32b(frac));
        out.extend(u32b(data.len() as u32));
        out.extend(u32b(orig));
        out.extend(data);
    }
    out
}

/// pcapng blocks, little-endian unless `big_endian`.
struct Ng {
    big_endian: bool,
    bytes: Vec<u8>,
}

impl Ng {
    fn new(big_endian: bool) -> Self {
        let mut ng = Ng {
            big_endian,
            bytes: Vec::new(),
        };
        ng.section();
        ng
    }

    fn u32b(&self, v: u32) -> [u8; 4] {
        if self.big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }

    fn u16b(&self, v: u16) -> [u8; 2] {
        if self.big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }

    fn block(&mut self, type_: u32, body: &[u8]) -> &mut Self {
        let mut body = body.to_vec();
        while !body.len().is_multiple_of(4) {
            body.push(0);
        }
        let len = (body.len() + 12) as u32;
        let (t, l) = (self.u32b(type_), self.u32b(len));
        self.bytes.extend(t);
        self.bytes.extend(l);
        self.bytes.extend(body);
        self.bytes.extend(l);
        self
    }

    fn section(&mut self) -> &mut Self {
        let mut body = Vec::new();
        body.extend(self.u32b(SECTION_BYTE_ORDER_MAGIC));
        body.extend(self.u16b(1));
        body.extend(self.u16b(0));
        body.extend([0xff; 8]); // section length unknown
        self.block(BLOCK_SECTION_HEADER, &body)
    }

    /// An interface, with `if_tsresol` when given.
    fn interface(&mut self, link_type: u16, tsresol: Option<u8>) -> &mut Self {
        let mut body = Vec::new();
        body.extend(self.u16b(link_type));
        body.extend(self.u16b(0));
        body.extend(self.u32b(0));
        if let Some(r) = tsresol {
            body.extend(self.u16b(9));
            body.extend(self.u16b(1));
            body.extend([r, 0, 0, 0]);
            body.extend([0; 4]); // opt_endofopt
        }
        self.block(BLOCK_INTERFACE_DESCRIPTION, &body)
    }

    fn enhanced(&mut self, interface: u32, ticks: u64, data: &[u8], orig: u32) -> &mut Self {
        let mut body = Vec::new();
        body.extend(self.u32b(interface));
        body.extend(self.u32b((ticks >> 32) as u32));
        body.extend(self.u32b(ticks as u32));
        body.extend(self.u32b(data.len() as u32));
        body.extend(self.u32b(orig));
        body.extend(data);
        self.block(BLOCK_ENHANCED_PACKET, &body)
    }

    /// The obsolete Packet Block, which old Wireshark versions still wrote.
    fn obsolete(&mut self, interface: u16, ticks: u64, data: &[u8], orig: u32) -> &mut Self {
        let mut body = Vec::new();
        body.extend(self.u16b(interface));
        body.extend(self.u16b(0));
        body.extend(self.u32b((ticks >> 32) as u32));
        body.extend(self.u32b(ticks as u32));
        body.extend(self.u32b(data.len() as u32));
        body.extend(self.u32b(orig));
        body.extend(data);
        self.block(BLOCK_PACKET, &body)
    }

    fn simple(&mut self, data: &[u8]) -> &mut Self {
        let mut body = Vec::new();
        body.extend(self.u32b(data.len() as u32));
        body.extend(data);
        self.block(BLOCK_SIMPLE_PACKET, &body)
    }
}

fn packet(ts_ns: u64, data: &[u8], orig_len: u32) -> CapturedPacket {
    CapturedPacket {
        ts_ns,
        orig_len,
        data: data.to_vec(),
    }
}

fn read_err(bytes: &[u8]) -> String {
    match read_capture_bytes("in.pcap", bytes) {
        Ok(r) => panic!("read {r:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn microsecond_pcap() {
    let bytes = pcap(false, false, 1, &[(1, 5, b"abc", 60), (2, 999_999, b"", 0)]);
    let mut r = CaptureReader::from_reader("in.pcap", &bytes[..]).unwrap();
    assert_eq!(r.format(), CaptureFormat::Pcap { nanos: false });
    assert_eq!((r.link_type(), r.snaplen()), (LinkType::ETHERNET, 65535));
    assert_eq!(
        r.next_packet().unwrap().unwrap(),
        packet(1_000_005_000, b"abc", 60)
    );
    assert_eq!(
        r.next_packet().unwrap().unwrap(),
        packet(2_999_999_000, b"", 0)
    );
    assert!(r.next_packet().is_none());
    assert!(r.next_packet().is_none());
}

#[test]
fn nanosecond_pcap() {
    let bytes = pcap(false, true, 101, &[(1, 5, b"\x45", 20)]);
    let r = CaptureReader::from_reader("in.pcap", &bytes[..]).unwrap();
    assert_eq!(r.format(), CaptureFormat::Pcap { nanos: true });
    assert_eq!(r.link_type(), LinkType::RAW);
    let (_, packets) = read_capture_bytes("in.pcap", &bytes).unwrap();
    assert_eq!(packets, [packet(1_000_000_005, b"\x45", 20)]);
}

#[test]
fn big_endian_pcap_in_both_resolutions() {
    for nanos in [false, true] {
        let bytes = pcap(true, nanos, 113, &[(7, 3, b"0123456789abcdef", 1500)]);
        assert_eq!(&bytes[..2], b"\xa1\xb2");
        let (link_type, packets) = read_capture_bytes("in.pcap", &bytes).unwrap();
        assert_eq!(link_type, LinkType::LINUX_SLL);
        let ts = 7_000_000_000 + if nanos { 3 } else { 3_000 };
        assert_eq!(packets, [packet(ts, b"0123456789abcdef", 1500)]);
    }
}

#[test]
fn pcapng_timestamp_resolutions() {
    for big_endian in [false, true] {
        let mut ng = Ng::new(big_endian);
        ng.interface(1, None) // default: microseconds
            .interface(1, Some(9))
            .interface(1, Some(0x80 | 10)) // 2^-10 s
            .enhanced(0, 1_500_000, b"first", 64)
            .enhanced(1, 1_500_000_123, b"second", 64)
            .enhanced(2, 3 << 10, b"third", 64)
            .simple(b"fourth");
        let mut r = CaptureReader::from_reader("in.pcapng", &ng.bytes[..]).unwrap();
        assert_eq!(
            (r.format(), r.link_type(), r.snaplen()),
            (CaptureFormat::PcapNg, LinkType::ETHERNET, MAX_CAPLEN)
        );
        let packets: Vec<CapturedPacket> = r.by_ref().map(Result::unwrap).collect();
        assert_eq!(
            packets,
            [
                packet(1_500_000_000, b"first", 64),
                packet(1_500_000_123, b"second", 64),
                packet(3_000_000_000, b"third", 64),
                // No timestamp of its own; no padding in its data.
                packet(3_000_000_000, b"fourth", 6),
            ]
        );
    }
}

#[test]
fn pcapng_obsolete_packet_block() {
    for big_endian in [false, true] {
        let mut ng = Ng::new(big_endian);
        let ticks = (5 << 32) + 7;
        ng.interface(1, Some(9)).obsolete(0, ticks, b"old", 80);
        let (_, packets) = read_capture_bytes("in.pcapng", &ng.bytes).unwrap();
        assert_eq!(
            packets,
            [packet(ticks, b"old", 80)],
            "big endian: {big_endian}"
        );
    }
}

#[test]
fn pcapng_ignores_blocks_it_does_not_use_and_starts_new_sections() {
    let mut ng = Ng::new(false);
    ng.block(0x0000_0bad, b"custom")
        .interface(228, Some(9))
        .enhanced(0, 10, b"a", 1);
    ng.section().interface(228, None).enhanced(0, 10, b"b", 1);
    let (link_type, packets) = read_capture_bytes("in.pcapng", &ng.bytes).unwrap();
    assert_eq!(link_type, LinkType::IPV4);
    assert_eq!(packets, [packet(10, b"a", 1), packet(10_000, b"b", 1)]);
}

#[test]
fn pcapng_interfaces_must_share_a_link_type() {
    let mut ng = Ng::new(false);
    ng.interface(1, None).enhanced(0, 1, b"a", 1);
    let offset = ng.bytes.len();
    ng.interface(113, None).enhanced(1, 2, b"b", 1);
    let mut r = CaptureReader::from_reader("in.pcapng", &ng.bytes[..]).unwrap();
    assert!(r.next_packet().unwrap().is_ok());
    let e = r.next_packet().unwrap().unwrap_err().to_string();
    assert!(e.contains(&format!("byte offset {offset}")), "{e}");
    assert!(
        e.contains("113 (DLT_LINUX_SLL)") && e.contains("1 (DLT_EN10MB)"),
        "{e}"
    );
    assert!(r.next_packet().is_none(), "a failed reader stays failed");
}

#[test]
fn pcapng_without_interface_or_with_unknown_interface() {
    let e = read_err(&Ng::new(false).bytes);
    assert!(e.contains("describes no interface"), "{e}");
    let mut ng = Ng::new(false);
    ng.interface(1, None).enhanced(3, 1, b"a", 1);
    let e = read_err(&ng.bytes);
    assert!(e.contains("interface 3 is not described"), "{e}");
    assert!(e.contains("(packet 1)"), "{e}");
}

#[test]
fn truncated_record_names_its_offset_and_packet() {
    let bytes = pcap(
        false,
        false,
        1,
        &[
            (0, 0, &[1; 100], 100),
            (0, 1, &[2; 100], 100),
            (0, 2, &[3; 100], 100),
        ],
    );
    let cut = &bytes[..bytes.len() - 30];
    let offset = 24 + 2 * (16 + 100);
    assert_eq!(
        read_err(cut),
        format!("in.pcap: truncated packet record at byte offset {offset} (packet 3)")
    );
    // Cut inside a record header.
    assert_eq!(
        read_err(&bytes[..24 + 5]),
        "in.pcap: truncated packet record at byte offset 24 (packet 1)"
    );
    // Cut inside the file header.
    assert!(read_err(&bytes[..10]).contains("truncated pcap file header"));
    // The packets before the cut are delivered first.
    let mut r = CaptureReader::from_reader("in.pcap", cut).unwrap();
    assert!(r.next_packet().unwrap().is_ok());
    assert!(r.next_packet().unwrap().is_ok());
    assert!(r.next_packet().unwrap().is_err());
    assert!(r.next_packet().is_none());

    let mut ng = Ng::new(false);
    ng.interface(1, None).enhanced(0, 1, &[0; 50], 50);
    let offset = ng.bytes.len();
    ng.enhanced(0, 2, &[0; 50], 50);
    let e = read_err(&ng.bytes[..ng.bytes.len() - 1]);
    assert_eq!(
        e,
        format!("in.pcap: truncated enhanced packet block at byte offset {offset} (packet 2)")
    );
}

#[test]
fn garbage_is_not_a_capture() {
    assert_eq!(
        read_err(b"this is not a capture file at all"),
        "in.pcap: not a pcap or pcapng file (it starts with 74 68 69 73 \"this\")"
    );
    assert_eq!(
        read_err(b""),
        "in.pcap: not a pcap or pcapng file (the file is empty)"
    );
    assert!(read_err(b"\xd4\xc3").contains("d4 c3 and is only 2 bytes long"));
    assert!(read_err(&[0; 64]).contains("00 00 00 00"));
}

#[test]
fn unknown_link_type_is_named() {
    let e = read_err(&pcap(false, false, 147, &[]));
    assert!(
        e.starts_with("in.pcap: unknown link type 147 (DLT_USER0);"),
        "{e}"
    );
    let e = read_err(&pcap(false, false, 65000, &[]));
    assert!(e.starts_with("in.pcap: unknown link type 65000;"), "{e}");
    let mut ng = Ng::new(false);
    ng.interface(105, None);
    let e = read_err(&ng.bytes);
    assert!(e.contains("unknown link type 105 (DLT_IEEE802_11)"), "{e}");
    for dlt in [0, 1, 101, 113, 228, 229, 276] {
        assert!(
            read_capture_bytes("in.pcap", &pcap(false, false, dlt, &[])).is_ok(),
            "{dlt}"
        );
    }
}

#[test]
fn corrupt_lengths_are_refused() {
    let e = read_err(&pcap(false, false, 1, &[(0, 0, b"abcd", 3)]));
    assert_eq!(
        e,
        "in.pcap: corrupt packet record at byte offset 24 (packet 1): captured length 4 exceeds the original length 3"
    );
    let mut bytes = pcap(false, false, 1, &[]);
    bytes.extend([0, 0, 0, 0, 0, 0, 0, 0]);
    bytes.extend(u32::MAX.to_le_bytes());
    bytes.extend(u32::MAX.to_le_bytes());
    let e = read_err(&bytes);
    assert!(
        e.contains("captured length 4294967295 exceeds the 262144-byte limit"),
        "{e}"
    );
    let mut ng = Ng::new(false);
    ng.interface(1, None);
    let at = ng.bytes.len();
    ng.bytes.extend([6, 0, 0, 0, 13, 0, 0, 0]);
    let e = read_err(&ng.bytes);
    assert_eq!(e, format!("in.pcap: corrupt enhanced packet block at byte offset {at} (packet 1): block length 13"));
}

#[test]
fn timestamp_fractions_of_a_second_or_more_are_refused() {
    // The last value below one second reads; one second or more names its record.
    let (_, ok) = read_capture_bytes(
        "in.pcap",
        &pcap(false, true, 1, &[(1, 999_999_999, b"a", 1)]),
    )
    .unwrap();
    assert_eq!(ok[0].ts_ns, 1_999_999_999);
    let e = read_err(&pcap(
        false,
        true,
        1,
        &[(1, 5, b"a", 1), (2, 1_000_000_000, b"b", 1)],
    ));
    assert_eq!(
        e,
        "in.pcap: corrupt packet record at byte offset 41 (packet 2): timestamp fraction \
         1000000000 nanoseconds is not below one second (1000000000)"
    );
    let e = read_err(&pcap(false, false, 1, &[(1, 1_000_000, b"a", 1)]));
    assert!(
        e.contains("(packet 1): timestamp fraction 1000000 microseconds"),
        "{e}"
    );
}

/// Every prefix and every single-byte corruption of valid files must give packets or an
/// error, never a panic: a cheap, deterministic stand-in for the fuzzer.
#[test]
fn damaged_files_never_panic() {
    let mut ng = Ng::new(false);
    ng.interface(1, Some(0x89))
        .enhanced(0, 123, b"hello", 5)
        .simple(b"xy");
    let files = [
        pcap(false, true, 1, &[(1, 2, b"abc", 3), (4, 5, b"de", 9)]),
        ng.bytes.clone(),
    ];
    for file in &files {
        for cut in 0..file.len() {
            let _ = read_capture_bytes("x", &file[..cut]);
        }
        for at in 0..file.len() {
            for value in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut damaged = file.clone();
                damaged[at] = value;
                let _ = read_capture_bytes("x", &damaged);
            }
        }
    }
}

#[test]
fn open_names_a_missing_file() {
    let e = CaptureReader::open(Path::new("/nonexistent/in.pcap"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.starts_with("/nonexistent/in.pcap: cannot open: "), "{e}");
}

#[test]
fn writer_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.pcap");
    let packets = [
        packet(0, b"", 0),
        packet(1_234_567_890_123, &[7; 1500], 1514),
        packet(u32::MAX as u64 * 1_000_000_000 + 999_999_999, b"x", 60),
    ];
    let mut w = CaptureWriter::create(&path, LinkType::LINUX_SLL2, 0).unwrap();
    for p in &packets {
        w.write(p.ts_ns, p.orig_len, &p.data).unwrap();
    }
    assert_eq!(w.packets(), 3);
    assert!(!path.exists(), "nothing at the target before finish");
    w.finish().unwrap();
    let mut r = CaptureReader::open(&path).unwrap();
    assert_eq!(r.format(), CaptureFormat::Pcap { nanos: true });
    assert_eq!(
        (r.link_type(), r.snaplen()),
        (LinkType::LINUX_SLL2, MAX_CAPLEN)
    );
    let read: Vec<CapturedPacket> = r.by_ref().map(Result::unwrap).collect();
    assert_eq!(read, packets);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporary file left"
    );

    // A plain integer works as the link type, and an existing file is replaced.
    let mut w = CaptureWriter::create(&path, 1, 65535).unwrap();
    w.write(5, 1, b"z").unwrap();
    w.finish().unwrap();
    let (link_type, read) = read_capture_bytes("out", &std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        (link_type, read),
        (LinkType::ETHERNET, vec![packet(5, b"z", 1)])
    );
}

#[test]
fn writer_refuses_what_cannot_be_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = CaptureWriter::create(&dir.path().join("out.pcap"), 1, 65535).unwrap();
    let e = w.write(0, 2, b"abc").unwrap_err().to_string();
    assert!(
        e.ends_with(
            "out.pcap: cannot write packet 1: 3 captured bytes exceed the original length 2"
        ),
        "{e}"
    );
    assert!(w.write(1 << 63, 3, b"abc").is_err());
    assert!(w
        .write(0, u32::MAX, &vec![0; MAX_CAPLEN as usize + 1])
        .is_err());
    assert!(
        CaptureWriter::create(dir.path(), 1, 0).is_err(),
        "a directory is not a capture"
    );
}

#[test]
fn dropped_writer_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.pcap");
    let mut w = CaptureWriter::create(&path, 1, 65535).unwrap();
    w.write(1, 3, b"abc").unwrap();
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "the temporary file exists meanwhile"
    );
    drop(w);
    assert!(!path.exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn link_type_names() {
    assert_eq!(LinkType(147).to_string(), "147 (DLT_USER0)");
    assert_eq!(LinkType::ETHERNET.to_string(), "1 (DLT_EN10MB)");
    assert_eq!(LinkType(276).name().as_deref(), Some("DLT_LINUX_SLL2"));
    assert_eq!(LinkType(60000).name(), None);
    assert_eq!(u32::from(LinkType::from(229)), 229);
}

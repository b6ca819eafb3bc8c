//! Capture files: pcap and pcapng in, nanosecond pcap out.
//!
//! Replay turns a capture into the capture the emulated link would have delivered, so the
//! reader has to accept what people actually have (tcpdump's microsecond pcap, nanosecond
//! pcap from either byte order, Wireshark's pcapng) and the writer has to keep the model's
//! nanosecond release times, hence nanosecond pcap on output whatever came in.
//!
//! Classic pcap is parsed by hand: it is a 24-byte header and 16-byte records, and owning
//! the loop lets every error name the byte offset of the record that failed, which
//! `pcap-file`'s reader cannot. pcapng blocks are framed here too (length, trailer, size
//! limit, offset) and their contents handed to `pcap-file`'s block parsers; framing them
//! ourselves also keeps `pcap-file`'s 8 MB read buffer out of the fuzzers' way.
//!
//! Inputs are hostile until proven otherwise: every length read from the file is checked
//! before it sizes an allocation, and the reader stops for good after its first error.

use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::blocks::section_header::SectionHeaderBlock;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{DataLink, PcapError};
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Largest captured length accepted, read or written (libpcap's and Wireshark's limit).
/// Anything longer is a corrupt length field, not a packet.
pub const MAX_CAPLEN: u32 = 256 * 1024;

/// Largest pcapng block read. Packet blocks stay far below it; the limit is there so a
/// corrupt length cannot make us buffer gigabytes before finding the block truncated.
const MAX_BLOCK_LEN: u32 = 64 << 20;

/// Buffer size for both directions: large enough that per-packet reads and writes are
/// memory copies and system calls happen once per megabyte.
const IO_BUFFER_BYTES: usize = 1 << 20;

const PCAP_HEADER_LEN: usize = 24;
const PCAP_RECORD_HEADER_LEN: usize = 16;
const PCAP_MAGIC_MICROS: u32 = 0xa1b2_c3d4;
const PCAP_MAGIC_NANOS: u32 = 0xa1b2_3c4d;

const BLOCK_SECTION_HEADER: u32 = 0x0a0d_0d0a;
const BLOCK_INTERFACE_DESCRIPTION: u32 = 0x0000_0001;
const BLOCK_PACKET: u32 = 0x0000_0002;
const BLOCK_SIMPLE_PACKET: u32 = 0x0000_0003;
const BLOCK_ENHANCED_PACKET: u32 = 0x0000_0006;
const SECTION_BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;

/// pcapng's default timestamp resolution when an interface has no `if_tsresol`: 10^-6 s.
const DEFAULT_TSRESOL: u8 = 6;

/// One packet as the capture recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedPacket {
    /// Time of capture in nanoseconds since the Unix epoch, whatever the file's resolution.
    pub ts_ns: u64,
    /// Length on the wire; the link model charges for this, not for what was captured.
    pub orig_len: u32,
    /// The captured bytes, possibly fewer than `orig_len` (snap length).
    pub data: Vec<u8>,
}

/// A capture's datalink type, kept as the raw LINKTYPE number so that the writer can
/// reproduce it exactly even for types this crate has no name for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkType(pub u32);

/// The name the rest of the project may use for [`LinkType`].
pub type LinkTypeInfo = LinkType;

impl LinkType {
    /// BSD loopback: a 4-byte address family in the capturing host's byte order.
    pub const NULL: LinkType = LinkType(0);
    pub const ETHERNET: LinkType = LinkType(1);
    /// Raw IP, version in the first nibble.
    pub const RAW: LinkType = LinkType(101);
    /// Linux cooked capture (`tcpdump -i any`).
    pub const LINUX_SLL: LinkType = LinkType(113);
    pub const IPV4: LinkType = LinkType(228);
    pub const IPV6: LinkType = LinkType(229);
    pub const LINUX_SLL2: LinkType = LinkType(276);

    /// The raw LINKTYPE number.
    pub fn dlt(self) -> u32 {
        self.0
    }

    /// libpcap's `DLT_` name, when the number is a registered one.
    pub fn name(self) -> Option<String> {
        if self == LinkType::ETHERNET {
            // pcap-file calls it ETHERNET; libpcap users know it as EN10MB.
            return Some("DLT_EN10MB".to_string());
        }
        match DataLink::from(self.0) {
            DataLink::Unknown(_) => None,
            known => Some(format!("DLT_{known:?}")),
        }
    }

    /// Whether replay knows where the packets of this link type begin and end; others are
    /// refused up front rather than emulated with a wrong notion of packet length.
    pub fn is_supported(self) -> bool {
        matches!(
            self,
            LinkType::NULL
                | LinkType::ETHERNET
                | LinkType::RAW
                | LinkType::LINUX_SLL
                | LinkType::IPV4
                | LinkType::IPV6
                | LinkType::LINUX_SLL2
        )
    }
}

impl From<u32> for LinkType {
    fn from(dlt: u32) -> Self {
        LinkType(dlt)
    }
}

impl From<LinkType> for u32 {
    fn from(link_type: LinkType) -> Self {
        link_type.0
    }
}

impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{} ({name})", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

/// The container a capture came in; reported so users can tell what was detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic pcap; `nanos` for the nanosecond variant.
    Pcap {
        nanos: bool,
    },
    PcapNg,
}

/// Why a capture could not be read or written. Every variant names the file, and those
/// about one record say where it starts, so the user can look at it with `xxd -s`.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("{file}: {action}: {source}")]
    Io {
        file: String,
        /// What was being done, e.g. "cannot open".
        action: &'static str,
        source: io::Error,
    },
    #[error("{file}: not a pcap or pcapng file ({})", describe_start(.start))]
    NotACapture {
        file: String,
        /// The first bytes of the file (at most 4).
        start: Vec<u8>,
    },
    #[error("{file}: truncated {record} at byte offset {offset}{}", packet_suffix(*.packet))]
    Truncated {
        file: String,
        /// What was cut, e.g. "packet record".
        record: &'static str,
        offset: u64,
        /// 1-based number of the packet the record would have been.
        packet: Option<u64>,
    },
    #[error("{file}: corrupt {record} at byte offset {offset}{}: {reason}", packet_suffix(*.packet))]
    Corrupt {
        file: String,
        record: &'static str,
        offset: u64,
        packet: Option<u64>,
        reason: String,
    },
    #[error(
        "{file}: unknown link type {link_type}; linkem reads Ethernet (1), raw IP (101, 228, 229), \
         Linux cooked capture (113, 276) and BSD loopback (0)"
    )]
    UnsupportedLinkType { file: String, link_type: LinkType },
    #[error(
        "{file}: the interface described at byte offset {offset} has link type {other} but an \
         earlier one has {first}; one capture must have one link type"
    )]
    MixedLinkTypes {
        file: String,
        offset: u64,
        first: LinkType,
        other: LinkType,
    },
    #[error("{file}: the pcapng file describes no interface, so its link type is unknown")]
    NoInterface { file: String },
    #[error("{file}: cannot write packet {packet}: {reason}")]
    Unwritable {
        file: String,
        packet: u64,
        reason: String,
    },
}

fn packet_suffix(packet: Option<u64>) -> String {
    packet.map(|n| format!(" (packet {n})")).unwrap_or_default()
}

fn describe_start(start: &[u8]) -> String {
    if start.is_empty() {
        return "the file is empty".to_string();
    }
    let hex: Vec<String> = start.iter().map(|b| format!("{b:02x}")).collect();
    let mut s = format!("it starts with {}", hex.join(" "));
    if start.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        s.push_str(&format!(" \"{}\"", String::from_utf8_lossy(start)));
    }
    if start.len() < 4 {
        s.push_str(&format!(" and is only {} bytes long", start.len()));
    }
    s
}

/// Reads `buf.len()` bytes unless the input ends first; returns how many were read, so
/// that a clean end (0) can be told from a cut record (between 0 and `buf.len()`).
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn u32_at(bytes: &[u8], at: usize, big_endian: bool) -> u32 {
    let mut b = [0u8; 4];
    if let Some(src) = bytes.get(at..at + 4) {
        b.copy_from_slice(src);
    }
    if big_endian {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    }
}

fn u16_at(bytes: &[u8], at: usize, big_endian: bool) -> u16 {
    let mut b = [0u8; 2];
    if let Some(src) = bytes.get(at..at + 2) {
        b.copy_from_slice(src);
    }
    if big_endian {
        u16::from_be_bytes(b)
    } else {
        u16::from_le_bytes(b)
    }
}

/// What a pcapng interface contributes to its packets.
#[derive(Debug, Clone, Copy)]
struct Interface {
    snaplen: u32,
    tsresol: u8,
    /// `if_tsoffset`: seconds to add to every timestamp.
    tsoffset_s: i64,
}

impl Interface {
    /// Timestamp units to nanoseconds. `None` when the result does not fit in u64
    /// nanoseconds (beyond the year 2554), which only a corrupt file produces.
    fn ts_ns(&self, ticks: u64) -> Option<u64> {
        let exp = u32::from(self.tsresol & 0x7f);
        let ns: u128 = if self.tsresol & 0x80 == 0 {
            // 10^-exp seconds per unit.
            if exp <= 9 {
                u128::from(ticks) * 10u128.pow(9 - exp)
            } else {
                match 10u128.checked_pow(exp - 9) {
                    Some(div) => u128::from(ticks) / div,
                    None => 0,
                }
            }
        } else {
            // 2^-exp seconds per unit; exp <= 127 so the shift is defined.
            (u128::from(ticks) * 1_000_000_000) >> exp
        };
        let ns = i128::try_from(ns).ok()? + i128::from(self.tsoffset_s) * 1_000_000_000;
        u64::try_from(ns).ok()
    }
}

enum Container {
    Pcap { big_endian: bool, nanos: bool },
    PcapNg(PcapNgState),
}

struct PcapNgState {
    big_endian: bool,
    /// pcap-file's block parser, which tracks the section's byte order; created from the
    /// first section header.
    parser: Option<PcapNgParser>,
    /// Interfaces of the current section (a new section starts a new list).
    interfaces: Vec<Interface>,
    /// The block being parsed, kept to reuse its allocation.
    block: Vec<u8>,
    /// Simple Packet Blocks carry no timestamp; they get the previous packet's so that
    /// time never runs backwards through the link.
    last_ts_ns: u64,
}

/// Where a block sits and what it is, for error messages.
struct BlockAt {
    type_: u32,
    offset: u64,
}

fn block_name(type_: u32) -> &'static str {
    match type_ {
        BLOCK_SECTION_HEADER => "section header block",
        BLOCK_INTERFACE_DESCRIPTION => "interface description block",
        BLOCK_PACKET => "packet block",
        BLOCK_SIMPLE_PACKET => "simple packet block",
        BLOCK_ENHANCED_PACKET => "enhanced packet block",
        _ => "pcapng block",
    }
}

fn is_packet_block(type_: u32) -> bool {
    matches!(
        type_,
        BLOCK_PACKET | BLOCK_SIMPLE_PACKET | BLOCK_ENHANCED_PACKET
    )
}

/// Reads packets one at a time, so a capture larger than memory can be replayed.
///
/// Generic over the input so that tests and fuzzers read from memory with no file; the
/// default is what [`CaptureReader::open`] returns.
pub struct CaptureReader<R: Read = BufReader<File>> {
    name: String,
    input: R,
    /// Bytes consumed from `input` so far.
    offset: u64,
    /// Packets returned so far.
    packets: u64,
    link_type: LinkType,
    snaplen: u32,
    format: CaptureFormat,
    container: Container,
    /// Set after the end or the first error: a reader that failed once is not trusted to
    /// resynchronise.
    done: bool,
}

impl CaptureReader<BufReader<File>> {
    /// Opens a capture file and reads its header (for pcapng, up to the first interface),
    /// so [`link_type`](Self::link_type) is known before the first packet.
    pub fn open(path: &Path) -> Result<Self, CaptureError> {
        let name = path.display().to_string();
        let file = File::open(path).map_err(|source| CaptureError::Io {
            file: name.clone(),
            action: "cannot open",
            source,
        })?;
        Self::from_reader(&name, BufReader::with_capacity(IO_BUFFER_BYTES, file))
    }
}

impl<R: Read> CaptureReader<R> {
    /// Reads a capture from any reader; `name` is what errors call it. The reader is read
    /// in small pieces, so give it a buffer unless it is already in memory.
    pub fn from_reader(name: &str, mut input: R) -> Result<Self, CaptureError> {
        let io_err = |source| CaptureError::Io {
            file: name.to_string(),
            action: "cannot read",
            source,
        };
        let mut magic = [0u8; 4];
        let n = read_full(&mut input, &mut magic).map_err(io_err)?;
        let not_a_capture = || CaptureError::NotACapture {
            file: name.to_string(),
            start: magic[..n].to_vec(),
        };
        if n < 4 {
            return Err(not_a_capture());
        }
        // (big endian, nanoseconds): the magic is written in the writer's byte order.
        let pcap = match u32::from_le_bytes(magic) {
            PCAP_MAGIC_MICROS => Some((false, false)),
            PCAP_MAGIC_NANOS => Some((false, true)),
            m if m.swap_bytes() == PCAP_MAGIC_MICROS => Some((true, false)),
            m if m.swap_bytes() == PCAP_MAGIC_NANOS => Some((true, true)),
            _ => None,
        };
        let mut reader = CaptureReader {
            name: name.to_string(),
            input,
            offset: 4,
            packets: 0,
            link_type: LinkType::ETHERNET,
            snaplen: MAX_CAPLEN,
            format: CaptureFormat::PcapNg,
            container: Container::PcapNg(PcapNgState {
                big_endian: false,
                parser: None,
                interfaces: Vec::new(),
                block: Vec::new(),
                last_ts_ns: 0,
            }),
            done: false,
        };
        if let Some((big_endian, nanos)) = pcap {
            reader.container = Container::Pcap { big_endian, nanos };
            reader.format = CaptureFormat::Pcap { nanos };
            reader.read_pcap_header(big_endian)?;
        } else if u32_at(&magic, 0, false) == BLOCK_SECTION_HEADER {
            reader.read_first_interface(&magic)?;
        } else {
            return Err(not_a_capture());
        }
        Ok(reader)
    }

    /// The capture's link type, the same for every packet.
    pub fn link_type(&self) -> LinkType {
        self.link_type
    }

    /// The capture's snap length (never 0: "no limit" reads as [`MAX_CAPLEN`]), for a
    /// writer that should promise no more than its input did.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    pub fn format(&self) -> CaptureFormat {
        self.format
    }

    /// The name errors use for this capture.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The next packet; `None` at the end of the capture and after an error.
    pub fn next_packet(&mut self) -> Option<Result<CapturedPacket, CaptureError>> {
        if self.done {
            return None;
        }
        let next = match self.container {
            Container::Pcap { big_endian, nanos } => self.next_pcap_record(big_endian, nanos),
            Container::PcapNg(_) => self.next_pcapng_packet(),
        };
        match next {
            Ok(Some(packet)) => Some(Ok(packet)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }

    fn io_err(&self, source: io::Error) -> CaptureError {
        CaptureError::Io {
            file: self.name.clone(),
            action: "cannot read",
            source,
        }
    }

    fn truncated(&self, record: &'static str, offset: u64, packet: Option<u64>) -> CaptureError {
        CaptureError::Truncated {
            file: self.name.clone(),
            record,
            offset,
            packet,
        }
    }

    fn corrupt(
        &self,
        record: &'static str,
        offset: u64,
        packet: Option<u64>,
        reason: String,
    ) -> CaptureError {
        CaptureError::Corrupt {
            file: self.name.clone(),
            record,
            offset,
            packet,
            reason,
        }
    }

    fn check_link_type(&self, link_type: LinkType) -> Result<(), CaptureError> {
        if link_type.is_supported() {
            Ok(())
        } else {
            Err(CaptureError::UnsupportedLinkType {
                file: self.name.clone(),
                link_type,
            })
        }
    }

    /// The lengths every packet must satisfy, whichever container it came in.
    fn check_lengths(
        &self,
        caplen: u64,
        orig_len: u32,
        record: &'static str,
        offset: u64,
    ) -> Result<(), CaptureError> {
        let packet = Some(self.packets + 1);
        if caplen > u64::from(MAX_CAPLEN) {
            return Err(self.corrupt(
                record,
                offset,
                packet,
                format!("captured length {caplen} exceeds the {MAX_CAPLEN}-byte limit"),
            ));
        }
        if caplen > u64::from(orig_len) {
            return Err(self.corrupt(
                record,
                offset,
                packet,
                format!("captured length {caplen} exceeds the original length {orig_len}"),
            ));
        }
        Ok(())
    }

    fn read_pcap_header(&mut self, big_endian: bool) -> Result<(), CaptureError> {
        let mut header = [0u8; PCAP_HEADER_LEN];
        let n = read_full(&mut self.input, &mut header[4..]).map_err(|e| self.io_err(e))?;
        if n < PCAP_HEADER_LEN - 4 {
            return Err(self.truncated("pcap file header", 0, None));
        }
        self.offset = PCAP_HEADER_LEN as u64;
        let major = u16_at(&header, 4, big_endian);
        let minor = u16_at(&header, 6, big_endian);
        if major != 2 {
            return Err(self.corrupt(
                "pcap file header",
                0,
                None,
                format!("version {major}.{minor} is not 2.x"),
            ));
        }
        let snaplen = u32_at(&header, 16, big_endian);
        self.snaplen = if snaplen == 0 { MAX_CAPLEN } else { snaplen };
        // The upper 16 bits carry FCS information, not the link type.
        self.link_type = LinkType(u32_at(&header, 20, big_endian) & 0xffff);
        self.check_link_type(self.link_type)
    }

    fn next_pcap_record(
        &mut self,
        big_endian: bool,
        nanos: bool,
    ) -> Result<Option<CapturedPacket>, CaptureError> {
        const RECORD: &str = "packet record";
        let offset = self.offset;
        let packet = Some(self.packets + 1);
        let mut header = [0u8; PCAP_RECORD_HEADER_LEN];
        let n = read_full(&mut self.input, &mut header).map_err(|e| self.io_err(e))?;
        if n == 0 {
            return Ok(None);
        }
        if n < header.len() {
            return Err(self.truncated(RECORD, offset, packet));
        }
        let sec = u64::from(u32_at(&header, 0, big_endian));
        let frac = u64::from(u32_at(&header, 4, big_endian));
        let caplen = u32_at(&header, 8, big_endian);
        let orig_len = u32_at(&header, 12, big_endian);
        self.check_lengths(u64::from(caplen), orig_len, RECORD, offset)?;
        // Checked above: caplen <= MAX_CAPLEN, so this allocation is bounded.
        let mut data = vec![0u8; caplen as usize];
        let n = read_full(&mut self.input, &mut data).map_err(|e| self.io_err(e))?;
        if n < data.len() {
            return Err(self.truncated(RECORD, offset, packet));
        }
        self.offset += (PCAP_RECORD_HEADER_LEN + data.len()) as u64;
        self.packets += 1;
        // Cannot overflow: sec < 2^32, so sec * 10^9 + frac * 1000 < 2^63.
        let ts_ns = sec * 1_000_000_000 + if nanos { frac } else { frac * 1000 };
        Ok(Some(CapturedPacket {
            ts_ns,
            orig_len,
            data,
        }))
    }

    fn ng(&mut self) -> &mut PcapNgState {
        match &mut self.container {
            Container::PcapNg(state) => state,
            Container::Pcap { .. } => unreachable!("pcapng code runs only on pcapng captures"),
        }
    }

    /// Reads the next block into `ng().block`, validating its framing; `already` holds
    /// bytes of it consumed before (the magic, on the first block). `None` at a clean end.
    fn read_block(&mut self, already: &[u8]) -> Result<Option<BlockAt>, CaptureError> {
        let offset = self.offset - already.len() as u64;
        let mut head = [0u8; 12];
        head[..already.len()].copy_from_slice(already);
        let n = already.len()
            + read_full(&mut self.input, &mut head[already.len()..8])
                .map_err(|e| self.io_err(e))?;
        if n == 0 {
            return Ok(None);
        }
        let mut big_endian = self.ng().big_endian;
        // Below 4 bytes the type is unknown; a type of 0 is no block we name.
        let type_ = if n >= 4 {
            u32_at(&head, 0, big_endian)
        } else {
            0
        };
        let packet = is_packet_block(type_).then_some(self.packets + 1);
        let record = block_name(type_);
        if n < 8 {
            return Err(self.truncated(record, offset, packet));
        }
        let mut head_len = 8;
        if type_ == BLOCK_SECTION_HEADER {
            // A section declares its own byte order, which the length is written in.
            let n = read_full(&mut self.input, &mut head[8..12]).map_err(|e| self.io_err(e))?;
            if n < 4 {
                return Err(self.truncated(record, offset, packet));
            }
            head_len = 12;
            big_endian = match u32_at(&head, 8, true) {
                SECTION_BYTE_ORDER_MAGIC => true,
                m if m.swap_bytes() == SECTION_BYTE_ORDER_MAGIC => false,
                m => {
                    return Err(self.corrupt(
                        record,
                        offset,
                        None,
                        format!("byte-order magic {m:#010x}"),
                    ))
                }
            };
        }
        let len = u32_at(&head, 4, big_endian);
        let min_len = if type_ == BLOCK_SECTION_HEADER {
            28
        } else {
            12
        };
        if !len.is_multiple_of(4) || len < min_len || len > MAX_BLOCK_LEN {
            return Err(self.corrupt(record, offset, packet, format!("block length {len}")));
        }
        let mut block = std::mem::take(&mut self.ng().block);
        block.clear();
        block.extend_from_slice(&head[..head_len]);
        let rest = u64::from(len) - head_len as u64;
        // Grows with the data actually present, so a lying length costs no memory.
        let read = (&mut self.input).take(rest).read_to_end(&mut block);
        let short = block.len() < len as usize;
        let trailer = u32_at(&block, block.len().saturating_sub(4), big_endian);
        self.ng().block = block;
        read.map_err(|e| self.io_err(e))?;
        if short {
            return Err(self.truncated(record, offset, packet));
        }
        if trailer != len {
            return Err(self.corrupt(
                record,
                offset,
                packet,
                format!("block length {len} at its start but {trailer} at its end"),
            ));
        }
        self.offset = offset + u64::from(len);
        if type_ == BLOCK_SECTION_HEADER {
            self.ng().big_endian = big_endian;
        }
        Ok(Some(BlockAt { type_, offset }))
    }

    /// Reads blocks up to the first interface description, which fixes the link type.
    fn read_first_interface(&mut self, magic: &[u8; 4]) -> Result<(), CaptureError> {
        let mut already: &[u8] = magic;
        loop {
            let Some(at) = self.read_block(already)? else {
                return Err(CaptureError::NoInterface {
                    file: self.name.clone(),
                });
            };
            already = &[];
            if is_packet_block(at.type_) {
                return Err(self.corrupt(
                    block_name(at.type_),
                    at.offset,
                    Some(1),
                    "packet before any interface description".into(),
                ));
            }
            self.take_block(&at, true)?;
            if !self.ng().interfaces.is_empty() {
                return Ok(());
            }
        }
    }

    fn next_pcapng_packet(&mut self) -> Result<Option<CapturedPacket>, CaptureError> {
        while let Some(at) = self.read_block(&[])? {
            if let Some(packet) = self.take_block(&at, false)? {
                self.packets += 1;
                return Ok(Some(packet));
            }
        }
        Ok(None)
    }

    fn pcap_file_error(&self, at: &BlockAt, e: PcapError) -> CaptureError {
        let packet = is_packet_block(at.type_).then_some(self.packets + 1);
        self.corrupt(block_name(at.type_), at.offset, packet, e.to_string())
    }

    /// Acts on the block just read: section and interface blocks update the state, packet
    /// blocks become packets, anything else is skipped. `first`: the block comes before the
    /// first interface, which will fix the capture's link type.
    fn take_block(
        &mut self,
        at: &BlockAt,
        first: bool,
    ) -> Result<Option<CapturedPacket>, CaptureError> {
        if !matches!(at.type_, BLOCK_SECTION_HEADER | BLOCK_INTERFACE_DESCRIPTION)
            && !is_packet_block(at.type_)
        {
            return Ok(None);
        }
        let block_bytes = std::mem::take(&mut self.ng().block);
        let result = self.parse_block(at, first, &block_bytes);
        self.ng().block = block_bytes;
        result
    }

    fn parse_block(
        &mut self,
        at: &BlockAt,
        first: bool,
        bytes: &[u8],
    ) -> Result<Option<CapturedPacket>, CaptureError> {
        let ng = self.ng();
        let parsed = match &mut ng.parser {
            Some(parser) => parser.next_block(bytes),
            None => PcapNgParser::new(bytes).map(|(rem, parser)| {
                let section = Block::SectionHeader(parser.section().clone());
                ng.parser = Some(parser);
                (rem, section)
            }),
        };
        let block = match parsed {
            Ok((_, block)) => block,
            Err(e) => return Err(self.pcap_file_error(at, e)),
        };
        match block {
            Block::SectionHeader(SectionHeaderBlock {
                major_version,
                minor_version,
                ..
            }) => {
                if major_version != 1 {
                    return Err(self.corrupt(
                        "section header block",
                        at.offset,
                        None,
                        format!("version {major_version}.{minor_version} is not 1.x"),
                    ));
                }
                // The byte order was taken from the block when it was framed.
                self.ng().interfaces.clear();
                Ok(None)
            }
            Block::InterfaceDescription(idb) => {
                // Read from the bytes rather than through pcap-file's DataLink so the number
                // survives exactly.
                let link_type = LinkType(u32::from(u16_at(bytes, 8, self.ng().big_endian)));
                self.check_link_type(link_type)?;
                if first {
                    self.link_type = link_type;
                    self.snaplen = if idb.snaplen == 0 {
                        MAX_CAPLEN
                    } else {
                        idb.snaplen
                    };
                } else if link_type != self.link_type {
                    return Err(CaptureError::MixedLinkTypes {
                        file: self.name.clone(),
                        offset: at.offset,
                        first: self.link_type,
                        other: link_type,
                    });
                }
                let mut interface = Interface {
                    snaplen: idb.snaplen,
                    tsresol: DEFAULT_TSRESOL,
                    tsoffset_s: 0,
                };
                for option in &idb.options {
                    match option {
                        InterfaceDescriptionOption::IfTsResol(r) => interface.tsresol = *r,
                        // The format stores a signed offset in an unsigned field.
                        InterfaceDescriptionOption::IfTsOffset(s) => {
                            interface.tsoffset_s = *s as i64
                        }
                        _ => {}
                    }
                }
                self.ng().interfaces.push(interface);
                Ok(None)
            }
            Block::EnhancedPacket(EnhancedPacketBlock {
                interface_id,
                timestamp,
                original_len,
                data,
                ..
            }) => {
                // pcap-file hands back the raw timestamp units as nanoseconds.
                let ticks = u64::try_from(timestamp.as_nanos()).unwrap_or(u64::MAX);
                self.make_packet(at, interface_id, Some(ticks), original_len, &data)
                    .map(Some)
            }
            Block::Packet(pb) => {
                // The timestamp is two 32-bit words, high first; pcap-file reads them as one
                // u64, which in a little-endian file puts the halves the wrong way round.
                let ticks = if self.ng().big_endian {
                    pb.timestamp
                } else {
                    pb.timestamp.rotate_left(32)
                };
                self.make_packet(
                    at,
                    u32::from(pb.interface_id),
                    Some(ticks),
                    pb.original_len,
                    &pb.data,
                )
                .map(Some)
            }
            Block::SimplePacket(spb) => {
                // The block's data includes padding: the real length is the smaller of
                // the original length and the interface's snap length.
                let snaplen = self.ng().interfaces.first().map_or(0, |i| i.snaplen);
                let mut caplen = spb.data.len().min(spb.original_len as usize);
                if snaplen != 0 {
                    caplen = caplen.min(snaplen as usize);
                }
                self.make_packet(at, 0, None, spb.original_len, &spb.data[..caplen])
                    .map(Some)
            }
            _ => Ok(None),
        }
    }

    fn make_packet(
        &mut self,
        at: &BlockAt,
        interface_id: u32,
        ticks: Option<u64>,
        orig_len: u32,
        data: &[u8],
    ) -> Result<CapturedPacket, CaptureError> {
        let record = block_name(at.type_);
        let packet = Some(self.packets + 1);
        let ng = self.ng();
        let Some(interface) = ng.interfaces.get(interface_id as usize).copied() else {
            let count = ng.interfaces.len();
            return Err(self.corrupt(
                record,
                at.offset,
                packet,
                format!(
                    "interface {interface_id} is not described (the section describes {count})"
                ),
            ));
        };
        self.check_lengths(data.len() as u64, orig_len, record, at.offset)?;
        let ts_ns = match ticks {
            None => self.ng().last_ts_ns,
            Some(ticks) => match interface.ts_ns(ticks) {
                Some(ts_ns) => ts_ns,
                None => {
                    return Err(self.corrupt(
                        record,
                        at.offset,
                        packet,
                        format!(
                            "timestamp {ticks} (resolution code {:#04x}) is out of range",
                            interface.tsresol
                        ),
                    ))
                }
            },
        };
        self.ng().last_ts_ns = ts_ns;
        Ok(CapturedPacket {
            ts_ns,
            orig_len,
            data: data.to_vec(),
        })
    }
}

impl<R: Read> Iterator for CaptureReader<R> {
    type Item = Result<CapturedPacket, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_packet()
    }
}

/// Reads a whole capture held in memory; for tests, fuzzers and small files.
pub fn read_capture_bytes(
    name: &str,
    bytes: &[u8],
) -> Result<(LinkType, Vec<CapturedPacket>), CaptureError> {
    let mut reader = CaptureReader::from_reader(name, bytes)?;
    let mut packets = Vec::new();
    while let Some(packet) = reader.next_packet() {
        packets.push(packet?);
    }
    Ok((reader.link_type(), packets))
}

/// Writes a nanosecond pcap that appears at its path only once complete.
///
/// Packets go to a temporary file next to the target (same file system, so the final
/// rename is atomic); [`finish`](Self::finish) renames it into place. Dropping the writer
/// without finishing, as an error path does, deletes the temporary file, so a failed run
/// never leaves a truncated capture that looks like a result.
pub struct CaptureWriter {
    name: String,
    // Declared before `temp`: fields drop in order, so the buffer is flushed (harmlessly)
    // before the temporary file is deleted.
    out: BufWriter<File>,
    temp: tempfile::TempPath,
    target: PathBuf,
    packets: u64,
}

impl CaptureWriter {
    /// Starts a capture of `link_type` frames at `path`; nothing appears there until
    /// [`finish`](Self::finish). A `snaplen` of 0 is written as [`MAX_CAPLEN`].
    pub fn create(
        path: &Path,
        link_type: impl Into<LinkType>,
        snaplen: u32,
    ) -> Result<Self, CaptureError> {
        let name = path.display().to_string();
        let io_err = |action, source| CaptureError::Io {
            file: name.clone(),
            action,
            source,
        };
        if path.is_dir() {
            return Err(io_err(
                "cannot write a capture",
                io::Error::other("it is a directory"),
            ));
        }
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let prefix = format!(
            ".{}.",
            path.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        );
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".tmp");
        #[cfg(unix)]
        {
            // tempfile's default 0600 would survive the rename; ask for what a plain
            // create gives (the umask still applies).
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(std::fs::Permissions::from_mode(0o666));
        }
        let temp = builder
            .tempfile_in(dir)
            .map_err(|e| io_err("cannot create a temporary file next to it", e))?;
        let (file, temp) = temp.into_parts();
        let mut out = BufWriter::with_capacity(IO_BUFFER_BYTES, file);
        let snaplen = if snaplen == 0 { MAX_CAPLEN } else { snaplen };
        let mut header = [0u8; PCAP_HEADER_LEN];
        header[0..4].copy_from_slice(&PCAP_MAGIC_NANOS.to_le_bytes());
        header[4..6].copy_from_slice(&2u16.to_le_bytes());
        header[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs stay 0, as every modern writer leaves them.
        header[16..20].copy_from_slice(&snaplen.to_le_bytes());
        header[20..24].copy_from_slice(&link_type.into().0.to_le_bytes());
        out.write_all(&header)
            .map_err(|e| io_err("cannot write", e))?;
        Ok(CaptureWriter {
            name,
            out,
            temp,
            target: path.to_path_buf(),
            packets: 0,
        })
    }

    /// Appends one packet. Refuses what the reader would refuse (captured bytes beyond the
    /// original length or [`MAX_CAPLEN`], times after 2106), so output can always be read back.
    pub fn write(&mut self, ts_ns: u64, orig_len: u32, data: &[u8]) -> Result<(), CaptureError> {
        let packet = self.packets + 1;
        let unwritable = |reason: String| CaptureError::Unwritable {
            file: self.name.clone(),
            packet,
            reason,
        };
        let caplen = match u32::try_from(data.len()) {
            Ok(n) if n <= MAX_CAPLEN => n,
            _ => {
                return Err(unwritable(format!(
                    "{} captured bytes exceed the {MAX_CAPLEN}-byte limit",
                    data.len()
                )))
            }
        };
        if caplen > orig_len {
            return Err(unwritable(format!(
                "{caplen} captured bytes exceed the original length {orig_len}"
            )));
        }
        let Ok(sec) = u32::try_from(ts_ns / 1_000_000_000) else {
            return Err(unwritable(format!(
                "timestamp {ts_ns} ns is beyond what pcap can store (year 2106)"
            )));
        };
        let nsec = (ts_ns % 1_000_000_000) as u32;
        let mut header = [0u8; PCAP_RECORD_HEADER_LEN];
        header[0..4].copy_from_slice(&sec.to_le_bytes());
        header[4..8].copy_from_slice(&nsec.to_le_bytes());
        header[8..12].copy_from_slice(&caplen.to_le_bytes());
        header[12..16].copy_from_slice(&orig_len.to_le_bytes());
        let written = self
            .out
            .write_all(&header)
            .and_then(|()| self.out.write_all(data));
        written.map_err(|source| CaptureError::Io {
            file: self.name.clone(),
            action: "cannot write",
            source,
        })?;
        self.packets = packet;
        Ok(())
    }

    /// Packets written so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Flushes the capture and renames it into place, replacing any file there.
    pub fn finish(self) -> Result<(), CaptureError> {
        let CaptureWriter {
            name,
            out,
            temp,
            target,
            ..
        } = self;
        let io_err = |action, source| CaptureError::Io {
            file: name.clone(),
            action,
            source,
        };
        let file = out
            .into_inner()
            .map_err(|e| io_err("cannot write", e.into_error()))?;
        drop(file);
        temp.persist(&target)
            .map_err(|e| io_err("cannot move the finished capture into place", e.error))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
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
}

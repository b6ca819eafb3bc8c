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

//!
//! The module follows the file's seams: [`linktype`] (what the frames are), `bytes`
//! (byte-order and short-read helpers), `pcap` (the classic format), `pcapng` (block
//! framing and bodies), `writer` (nanosecond pcap out, through [`crate::outfile`]).
//!
//! `pcap-file` stays, for pcapng block bodies and link-type names only: the section,
//! interface (with its options: `if_tsresol`, `if_tsoffset`), enhanced, obsolete and
//! simple packet blocks, and libpcap's names for the ~150 registered link types. By hand
//! that is an options parser and a name table it already gets right, to save one
//! well-kept dependency; everything that decides safety and error messages (framing,
//! byte order, length limits, offsets) is ours, and its two quirks (the obsolete packet
//! block's timestamp halves, timestamps handed back as nanoseconds while they are raw
//! units) are corrected in `pcapng` where they are used. The writer needs nothing of
//! it: a nanosecond pcap is a 24-byte header and 16-byte records.

mod bytes;
pub mod linktype;
mod pcap;
mod pcapng;
#[cfg(test)]
mod tests;
mod writer;

pub use linktype::{LinkType, LinkTypeInfo};
pub use writer::CaptureWriter;

use crate::outfile::OutputError;
use bytes::{read_full, u32_at};
use pcapng::PcapNgState;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

/// Largest captured length accepted, read or written (libpcap's and Wireshark's limit).
/// Anything longer is a corrupt length field, not a packet.
pub const MAX_CAPLEN: u32 = 256 * 1024;

/// Largest pcapng block read. Packet blocks stay far below it; the limit is there so a
/// corrupt length cannot make us buffer gigabytes before finding the block truncated.
pub(crate) const MAX_BLOCK_LEN: u32 = 64 << 20;

/// Buffer size for both directions: large enough that per-packet reads and writes are
/// memory copies and system calls happen once per megabyte.
pub(crate) const IO_BUFFER_BYTES: usize = 1 << 20;

pub(crate) const PCAP_HEADER_LEN: usize = 24;
pub(crate) const PCAP_RECORD_HEADER_LEN: usize = 16;
pub(crate) const PCAP_MAGIC_MICROS: u32 = 0xa1b2_c3d4;
pub(crate) const PCAP_MAGIC_NANOS: u32 = 0xa1b2_3c4d;

pub(crate) const BLOCK_SECTION_HEADER: u32 = 0x0a0d_0d0a;
pub(crate) const BLOCK_INTERFACE_DESCRIPTION: u32 = 0x0000_0001;
pub(crate) const BLOCK_PACKET: u32 = 0x0000_0002;
pub(crate) const BLOCK_SIMPLE_PACKET: u32 = 0x0000_0003;
pub(crate) const BLOCK_ENHANCED_PACKET: u32 = 0x0000_0006;
pub(crate) const SECTION_BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;

/// pcapng's default timestamp resolution when an interface has no `if_tsresol`: 10^-6 s.
pub(crate) const DEFAULT_TSRESOL: u8 = 6;

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

/// A packet's stamp and length, its bytes read into the caller's buffer
/// ([`CaptureReader::next_packet_into`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketHead {
    /// As [`CapturedPacket::ts_ns`].
    pub ts_ns: u64,
    /// As [`CapturedPacket::orig_len`].
    pub orig_len: u32,
}

impl PacketHead {
    fn with_data(self, data: Vec<u8>) -> CapturedPacket {
        CapturedPacket {
            ts_ns: self.ts_ns,
            orig_len: self.orig_len,
            data,
        }
    }
}

/// The container a capture came in; reported so users can tell what was detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic pcap, in either byte order: one link type and one timestamp
    /// resolution for the whole file.
    Pcap {
        /// `true` for the nanosecond variant (magic `0xa1b23c4d`), `false` for
        /// tcpdump's microsecond pcap (magic `0xa1b2c3d4`).
        nanos: bool,
    },
    /// pcapng: each interface has its own resolution (`if_tsresol`, default
    /// microseconds) and offset (`if_tsoffset`, seconds), both applied when the
    /// timestamp is read; all interfaces must share one link type.
    PcapNg,
}

/// Why a capture could not be read or written. Every variant names the file, and those
/// about one record say where it starts, so the user can look at it with `xxd -s`.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// Opening, reading or writing the file failed at the system level.
    #[error("{file}: {action}: {source}")]
    Io {
        /// The capture's name as given (path, or the name passed to
        /// [`CaptureReader::from_reader`]).
        file: String,
        /// What was being done, e.g. "cannot open".
        action: &'static str,
        /// The system's error.
        source: io::Error,
    },
    /// The first four bytes are neither a pcap magic (either byte order, micro- or
    /// nanoseconds) nor a pcapng section header block, or the file is shorter than that.
    #[error("{file}: not a pcap or pcapng file ({})", describe_start(.start))]
    NotACapture {
        /// The capture's name as given.
        file: String,
        /// The first bytes of the file (at most 4).
        start: Vec<u8>,
    },
    /// The file ends inside a header, record or block.
    #[error("{file}: truncated {record} at byte offset {offset}{}", packet_suffix(*.packet))]
    Truncated {
        /// The capture's name as given.
        file: String,
        /// What was cut, e.g. "packet record".
        record: &'static str,
        /// Byte offset from the start of the file at which the cut record begins.
        offset: u64,
        /// 1-based number of the packet the record would have been; `None` for
        /// headers and blocks that carry no packet.
        packet: Option<u64>,
    },
    /// A header, record or block is complete but wrong: a version other than pcap 2.x
    /// or pcapng 1.x, a bad byte-order magic, a block length that is bad or differs
    /// from its trailer, a captured length beyond [`MAX_CAPLEN`] or the original
    /// length, a packet for an interface never described (or before any), a timestamp
    /// beyond `u64` nanoseconds, a pcap record whose fraction of a second is not
    /// below one second (10⁶ µs, 10⁹ ns), or a block body `pcap-file` cannot parse.
    #[error("{file}: corrupt {record} at byte offset {offset}{}: {reason}", packet_suffix(*.packet))]
    Corrupt {
        /// The capture's name as given.
        file: String,
        /// What kind of record, e.g. "packet record" or "interface description block".
        record: &'static str,
        /// Byte offset from the start of the file at which the record begins.
        offset: u64,
        /// 1-based number of the packet the record holds; `None` when it holds none.
        packet: Option<u64>,
        /// What is wrong, with the offending value.
        reason: String,
    },
    /// The capture's link type is not one [`LinkType::is_supported`] accepts.
    #[error(
        "{file}: unknown link type {link_type}; linkem reads Ethernet (1), raw IP (101, 228, 229), \
         Linux cooked capture (113, 276) and BSD loopback (0)"
    )]
    UnsupportedLinkType {
        /// The capture's name as given.
        file: String,
        /// The link type found in the pcap header or the interface description.
        link_type: LinkType,
    },
    /// A pcapng interface description has a link type other than the first one's.
    #[error(
        "{file}: the interface described at byte offset {offset} has link type {other} but an \
         earlier one has {first}; one capture must have one link type"
    )]
    MixedLinkTypes {
        /// The capture's name as given.
        file: String,
        /// Byte offset of the interface description block with the different type.
        offset: u64,
        /// The link type of the first interface, which the capture is read as.
        first: LinkType,
        /// The differing link type.
        other: LinkType,
    },
    /// A pcapng file ended before its first interface description block.
    #[error("{file}: the pcapng file describes no interface, so its link type is unknown")]
    NoInterface {
        /// The capture's name as given.
        file: String,
    },
    /// The output file could not be created or committed ([`crate::outfile`]).
    #[error(transparent)]
    Output(#[from] OutputError),
    /// [`CaptureWriter::write`] refused a packet that no reader would accept back.
    #[error("{file}: cannot write packet {packet}: {reason}")]
    Unwritable {
        /// The output's name as given.
        file: String,
        /// 1-based number of the refused packet in the output.
        packet: u64,
        /// Why: captured bytes beyond [`MAX_CAPLEN`] or the original length, or a
        /// timestamp past 2106 (beyond pcap's 32-bit seconds).
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

enum Container {
    Pcap { big_endian: bool, nanos: bool },
    PcapNg(PcapNgState),
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
            container: Container::PcapNg(PcapNgState::new()),
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

    /// Which container was detected, and for pcap whether it is the nanosecond variant.
    /// Packets come out in nanoseconds ([`CapturedPacket::ts_ns`]) either way.
    pub fn format(&self) -> CaptureFormat {
        self.format
    }

    /// The pcapng interface (its index in the section) the packet last returned came
    /// from; `None` for classic pcap, which has one implicit interface, and before the
    /// first packet. A recording keeps the bridge's two sides apart this way.
    pub fn last_interface(&self) -> Option<u32> {
        match &self.container {
            Container::PcapNg(ng) if self.packets > 0 => Some(ng.last_interface),
            _ => None,
        }
    }

    /// The name errors use for this capture.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The next packet; `None` at the end of the capture and after an error.
    pub fn next_packet(&mut self) -> Option<Result<CapturedPacket, CaptureError>> {
        let mut data = Vec::new();
        let head = self.next_packet_into(&mut data)?;
        Some(head.map(|head| head.with_data(data)))
    }

    /// [`next_packet`](Self::next_packet), the captured bytes into `data`
    /// (replaced), so a reader of many packets allocates none per packet.
    pub fn next_packet_into(
        &mut self,
        data: &mut Vec<u8>,
    ) -> Option<Result<PacketHead, CaptureError>> {
        if self.done {
            return None;
        }
        let next = match self.container {
            Container::Pcap { big_endian, nanos } => self.next_pcap_record(big_endian, nanos, data),
            Container::PcapNg(_) => self.next_pcapng_packet().map(|p| {
                p.map(|p| {
                    *data = p.data;
                    PacketHead {
                        ts_ns: p.ts_ns,
                        orig_len: p.orig_len,
                    }
                })
            }),
        };
        match next {
            Ok(Some(head)) => Some(Ok(head)),
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

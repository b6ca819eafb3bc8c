//! pcapng: blocks framed here (type, length, trailer, the section's byte order, the
//! size limit, offsets for errors), bodies parsed by `pcap-file` (see the module doc of
//! `capture` for why).

use super::bytes::{read_full, u16_at, u32_at};
use super::{
    CaptureError, CaptureReader, CapturedPacket, Container, LinkType, BLOCK_ENHANCED_PACKET,
    BLOCK_INTERFACE_DESCRIPTION, BLOCK_PACKET, BLOCK_SECTION_HEADER, BLOCK_SIMPLE_PACKET,
    DEFAULT_TSRESOL, MAX_BLOCK_LEN, MAX_CAPLEN, SECTION_BYTE_ORDER_MAGIC,
};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::section_header::SectionHeaderBlock;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::PcapError;
use std::io::Read;

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

pub(super) struct PcapNgState {
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
    /// The interface of the packet last returned, for readers that keep sides apart.
    pub(super) last_interface: u32,
}

impl PcapNgState {
    pub(super) fn new() -> PcapNgState {
        PcapNgState {
            big_endian: false,
            parser: None,
            interfaces: Vec::new(),
            block: Vec::new(),
            last_ts_ns: 0,
            last_interface: 0,
        }
    }
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

impl<R: Read> CaptureReader<R> {
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
    pub(super) fn read_first_interface(&mut self, magic: &[u8; 4]) -> Result<(), CaptureError> {
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

    pub(super) fn next_pcapng_packet(&mut self) -> Result<Option<CapturedPacket>, CaptureError> {
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
                self.add_interface(at, first, bytes, &idb)?;
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

    /// Adds the interface an interface description block describes to the section's
    /// list; the first one fixes the capture's link type and snap length.
    fn add_interface(
        &mut self,
        at: &BlockAt,
        first: bool,
        bytes: &[u8],
        idb: &InterfaceDescriptionBlock,
    ) -> Result<(), CaptureError> {
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
                InterfaceDescriptionOption::IfTsOffset(s) => interface.tsoffset_s = *s as i64,
                _ => {}
            }
        }
        self.ng().interfaces.push(interface);
        Ok(())
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
        self.ng().last_interface = interface_id;
        Ok(CapturedPacket {
            ts_ns,
            orig_len,
            data: data.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interface(tsresol: u8, tsoffset_s: i64) -> Interface {
        Interface {
            snaplen: 0,
            tsresol,
            tsoffset_s,
        }
    }

    #[test]
    fn timestamp_units_to_nanoseconds() {
        assert_eq!(interface(6, 0).ts_ns(1_500_000), Some(1_500_000_000));
        assert_eq!(interface(9, 0).ts_ns(7), Some(7));
        assert_eq!(interface(12, 0).ts_ns(7_000), Some(7));
        // 2^-10 s per unit.
        assert_eq!(interface(0x80 | 10, 0).ts_ns(1024), Some(1_000_000_000));
        assert_eq!(interface(6, 2).ts_ns(0), Some(2_000_000_000));
        // Before the epoch, or beyond u64 nanoseconds: refused, not wrapped.
        assert_eq!(interface(6, -1).ts_ns(0), None);
        assert_eq!(interface(0, 0).ts_ns(u64::MAX), None);
        // A resolution finer than any u128 can scale gives 0, never a panic.
        assert_eq!(interface(127, 0).ts_ns(u64::MAX), Some(0));
        assert_eq!(interface(0xff, 0).ts_ns(u64::MAX), Some(0));
    }

    #[test]
    fn block_kinds() {
        assert!(is_packet_block(BLOCK_ENHANCED_PACKET) && is_packet_block(BLOCK_PACKET));
        assert!(is_packet_block(BLOCK_SIMPLE_PACKET));
        assert!(!is_packet_block(BLOCK_SECTION_HEADER));
        assert_eq!(
            block_name(BLOCK_INTERFACE_DESCRIPTION),
            "interface description block"
        );
        assert_eq!(block_name(0x0bad), "pcapng block");
    }
}

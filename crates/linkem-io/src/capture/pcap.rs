//! Classic pcap: a 24-byte file header, then 16-byte record headers each followed by
//! its captured bytes, all in the byte order the magic number shows; timestamps in
//! microseconds or (magic `a1b23c4d`) nanoseconds.

use super::bytes::{read_full, u16_at, u32_at};
use super::{
    CaptureError, CaptureReader, LinkType, PacketHead, MAX_CAPLEN, PCAP_HEADER_LEN,
    PCAP_RECORD_HEADER_LEN,
};
use std::io::Read;

impl<R: Read> CaptureReader<R> {
    pub(super) fn read_pcap_header(&mut self, big_endian: bool) -> Result<(), CaptureError> {
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

    /// The next record, its captured bytes into `data` (whose allocation is
    /// reused: a replay reads a million records into one buffer).
    pub(super) fn next_pcap_record(
        &mut self,
        big_endian: bool,
        nanos: bool,
        data: &mut Vec<u8>,
    ) -> Result<Option<PacketHead>, CaptureError> {
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
        // A fraction of a second past a whole second is a corrupt record: read
        // as is it would move the packet up to 4 s (or 71 min in µs) later.
        let (per_second, unit) = if nanos {
            (1_000_000_000, "nanoseconds")
        } else {
            (1_000_000, "microseconds")
        };
        if frac >= per_second {
            return Err(self.corrupt(
                RECORD,
                offset,
                packet,
                format!("timestamp fraction {frac} {unit} is not below one second ({per_second})"),
            ));
        }
        // Checked above: caplen <= MAX_CAPLEN, so this allocation is bounded.
        // Every byte is read over below (or the record is refused), so the
        // bytes of the packet before need no clearing.
        data.resize(caplen as usize, 0);
        let n = read_full(&mut self.input, data).map_err(|e| self.io_err(e))?;
        if n < data.len() {
            return Err(self.truncated(RECORD, offset, packet));
        }
        self.offset += (PCAP_RECORD_HEADER_LEN + data.len()) as u64;
        self.packets += 1;
        // Cannot overflow: sec < 2^32, so sec * 10^9 + frac * 1000 < 2^63.
        let ts_ns = sec * 1_000_000_000 + if nanos { frac } else { frac * 1000 };
        Ok(Some(PacketHead { ts_ns, orig_len }))
    }
}

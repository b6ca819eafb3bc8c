//! Nanosecond pcap out, under linkem's rule for output files.

use super::{
    CaptureError, LinkType, IO_BUFFER_BYTES, MAX_CAPLEN, PCAP_HEADER_LEN, PCAP_MAGIC_NANOS,
    PCAP_RECORD_HEADER_LEN,
};
use crate::outfile::OutputFile;
use std::io::Write;
use std::path::Path;

/// Writes a nanosecond pcap under linkem's rule for output files
/// ([`crate::outfile`]): a regular file appears at its path only once complete.
///
/// Packets go to a temporary file next to the target (same file system, so the final
/// rename is atomic); [`finish`](Self::finish) renames it into place. Dropping the writer
/// without finishing, as an error path does, deletes the temporary file, so a failed run
/// never leaves a truncated capture that looks like a result. A device or FIFO
/// (`/dev/null`, a pipe) is written in place.
pub struct CaptureWriter {
    name: String,
    out: OutputFile,
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
        let mut out = OutputFile::create(path, IO_BUFFER_BYTES)?;
        let snaplen = if snaplen == 0 { MAX_CAPLEN } else { snaplen };
        let mut header = [0u8; PCAP_HEADER_LEN];
        header[0..4].copy_from_slice(&PCAP_MAGIC_NANOS.to_le_bytes());
        header[4..6].copy_from_slice(&2u16.to_le_bytes());
        header[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs stay 0, as every modern writer leaves them.
        header[16..20].copy_from_slice(&snaplen.to_le_bytes());
        header[20..24].copy_from_slice(&link_type.into().0.to_le_bytes());
        out.write_all(&header).map_err(|source| CaptureError::Io {
            file: name.clone(),
            action: "cannot write",
            source,
        })?;
        Ok(CaptureWriter {
            name,
            out,
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

    /// Flushes the capture and, for a regular file, renames it into place.
    pub fn finish(self) -> Result<(), CaptureError> {
        Ok(self.out.commit()?)
    }
}

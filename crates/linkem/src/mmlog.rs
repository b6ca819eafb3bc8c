//! `--log-a-to-b FILE` / `--log-b-to-a FILE`: the link log of mahimahi's
//! `mm-link --uplink-log/--downlink-log`, so that `mm-throughput-graph`,
//! `mm-delay-graph`, `linkem plot` and users' scripts read it.
//!
//! The format, as mahimahi's `LinkQueue` writes it (src/frontend/link_queue.cc):
//! a header of `#` lines, of which readers use `# base timestamp: B`, then one
//! line per event, times in whole milliseconds since the run began
//! (`init timestamp`, epoch ms, is when it began):
//!
//! ```text
//! T + BYTES             a packet arrived
//! T - BYTES DELAY       a packet left, DELAY = T - its arrival's T (ms)
//! T # BYTES             a delivery opportunity (trace links only)
//! ```
//!
//! Here T = ⌊t_ns / 10⁶⌋ − init_ms on CLOCK_REALTIME (the stage's clock),
//! the base timestamp is 0 (the link starts with the run) and BYTES is the
//! IP packet's length (the frame less its 14-byte Ethernet header), what
//! mahimahi's TUN device sees. DELAY covers all the link does (queue, rate
//! and `delay`), as a chain of mahimahi shells would add up. A packet
//! dropped has its `+` line and no `-` line, as in mahimahi's droptail
//! queue; a duplicate has two `-` lines. mahimahi's `d` lines (AQM drops)
//! are not written: its own graph scripts refuse them. The log is written
//! off the packet path (a bounded queue to a writer thread, as `--events`):
//! decisions the writer cannot keep up with are skipped and counted.
//!
//! Lines are in time order: a departure is held until an arrival at or
//! after its time is written (or the run ends).

use linkem_core::fate::Fate;
use linkem_core::model::Change;
use linkem_core::node::Decision;
use linkem_core::rules::Side;
use linkem_runtime::pipeline::Tap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Bytes of the Ethernet header, not counted (mahimahi counts IP packets).
pub const ETHERNET_HEADER_BYTES: u32 = 14;
/// Decisions waiting for the writer at most.
const QUEUE_RECORDS: usize = 1 << 16;

/// What the header says about one direction's log.
#[derive(Debug, Clone)]
pub struct LogHeader {
    /// `uplink` (a-to-b, what the shell's command sends) or `downlink`.
    pub link_name: String,
    /// The link's words.
    pub link: String,
    /// The file's name as given.
    pub file: String,
    /// The command line.
    pub command_line: String,
    /// Epoch ms at which times start (mahimahi's `init timestamp`).
    pub init_ms: u64,
}

/// One direction's log, written in time order.
pub struct MmLog<W: Write> {
    out: W,
    init_ms: u64,
    /// (time ms, bytes, delay ms) of departures not yet written.
    pending: BinaryHeap<Reverse<(u64, u32, u64)>>,
}

impl<W: Write> MmLog<W> {
    /// Writes the header.
    pub fn new(mut out: W, h: &LogHeader) -> std::io::Result<MmLog<W>> {
        writeln!(
            out,
            "# linkem link ({}) [{}] > {}",
            h.link_name, h.link, h.file
        )?;
        writeln!(out, "# command line: {}", h.command_line)?;
        writeln!(out, "# queue: {}", h.link)?;
        writeln!(out, "# init timestamp: {}", h.init_ms)?;
        writeln!(out, "# base timestamp: 0")?;
        Ok(MmLog {
            out,
            init_ms: h.init_ms,
            pending: BinaryHeap::new(),
        })
    }

    fn ms(&self, t_ns: u64) -> u64 {
        (t_ns / 1_000_000).saturating_sub(self.init_ms)
    }

    /// A packet of `frame_bytes` that arrived at `arrival_ns` and left at
    /// each of `releases_ns` (none when dropped).
    pub fn packet(
        &mut self,
        arrival_ns: u64,
        frame_bytes: u32,
        releases_ns: &[u64],
    ) -> std::io::Result<()> {
        let at = self.ms(arrival_ns);
        self.flush_until(at)?;
        let bytes = frame_bytes.saturating_sub(ETHERNET_HEADER_BYTES);
        writeln!(self.out, "{at} + {bytes}")?;
        for &r in releases_ns {
            let left = self.ms(r).max(at);
            self.pending.push(Reverse((left, bytes, left - at)));
        }
        Ok(())
    }

    fn flush_until(&mut self, t_ms: u64) -> std::io::Result<()> {
        while let Some(Reverse((left, bytes, delay))) = self.pending.peek().copied() {
            if left > t_ms {
                break;
            }
            self.pending.pop();
            writeln!(self.out, "{left} - {bytes} {delay}")?;
        }
        Ok(())
    }

    /// Writes the departures still held; returns the output.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.flush_until(u64::MAX)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

struct Record {
    side: Side,
    arrival_ns: u64,
    len_bytes: u32,
    release_ns: u64,
    copies: u8,
}

/// The stage's end: copies what the logs need into the channel.
pub struct LogTap {
    tx: Option<SyncSender<Record>>,
    skipped: Arc<AtomicU64>,
}

impl Tap for LogTap {
    fn frame(&mut self, _side: Side, _ts_ns: u64, _bytes: &[u8]) {}

    #[inline]
    fn decision(&mut self, arrival_ns: u64, len_bytes: u32, d: &Decision) {
        let Some(tx) = &self.tx else { return };
        let copies = if d.fate == Fate::Delivered {
            1 + d.duplicate as u8
        } else {
            0
        };
        let r = Record {
            side: d.side,
            arrival_ns,
            len_bytes,
            release_ns: d.release_ns,
            copies,
        };
        if !crate::live_events::offer(tx, r, &self.skipped) {
            self.tx = None;
        }
    }

    fn changes(&mut self, _at_ns: u64, _changes: &[Change]) {}
}

/// The writer thread of both directions' logs.
pub struct LogWriter<W> {
    thread: JoinHandle<std::io::Result<[Option<W>; 2]>>,
    skipped: Arc<AtomicU64>,
}

/// Starts the writer on the logs asked for (`[a-to-b, b-to-a]`).
pub fn start<W: Write + Send + 'static>(
    logs: [Option<MmLog<W>>; 2],
) -> std::io::Result<(LogTap, LogWriter<W>)> {
    let (tx, rx) = sync_channel::<Record>(QUEUE_RECORDS);
    let skipped = Arc::new(AtomicU64::new(0));
    let thread = std::thread::Builder::new()
        .name("linkem-log".into())
        .spawn(move || {
            let mut logs = logs;
            for r in rx {
                if let Some(log) = logs[r.side.index()].as_mut() {
                    let releases = [r.release_ns; 2];
                    log.packet(r.arrival_ns, r.len_bytes, &releases[..r.copies as usize])?;
                }
            }
            let [a, b] = logs;
            Ok([
                a.map(MmLog::finish).transpose()?,
                b.map(MmLog::finish).transpose()?,
            ])
        })?;
    let tap = LogTap {
        tx: Some(tx),
        skipped: skipped.clone(),
    };
    Ok((tap, LogWriter { thread, skipped }))
}

impl<W> LogWriter<W> {
    /// Waits for the writer (the stage must have stopped and dropped its
    /// tap); returns the outputs and the decisions skipped.
    pub fn finish(self) -> std::io::Result<([Option<W>; 2], u64)> {
        let outs = self
            .thread
            .join()
            .map_err(|_| std::io::Error::other("the log writer panicked"))??;
        Ok((outs, self.skipped.load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What mahimahi's LinkQueue writes for the same events, statement by
    /// statement (`arrival_time << " + " << pkt_size`, `departure_time <<
    /// " - " << size << " " << departure_time - arrival_time`), with its
    /// header's `# base timestamp:` line that the graph scripts read.
    fn mahimahi_lines(events: &[(u64, char, u32, u64)]) -> Vec<String> {
        events
            .iter()
            .map(|&(t, kind, bytes, delay)| match kind {
                '+' => format!("{t} + {bytes}"),
                _ => format!("{t} - {bytes} {delay}"),
            })
            .collect()
    }

    #[test]
    fn the_log_reads_as_mahimahis_link_log() {
        let init_ms = 1_700_000_000_000u64;
        let ns = |ms: u64, sub: u64| (init_ms + ms) * 1_000_000 + sub;
        let header = LogHeader {
            link_name: "uplink".into(),
            link: "delay 20ms".into(),
            file: "up.log".into(),
            command_line: "linkem shell delay 20ms -- true".into(),
            init_ms,
        };
        let mut log = MmLog::new(Vec::new(), &header).unwrap();
        // A 1514-byte frame at 5.3 ms leaving at 25.9 ms; a 74-byte frame at
        // 10 ms dropped; a duplicated 100-byte frame at 30 ms leaving at 50 ms;
        // one at 40 ms leaving at 60 ms (after the duplicate's departures).
        log.packet(ns(5, 300_000), 1514, &[ns(25, 900_000)])
            .unwrap();
        log.packet(ns(10, 0), 74, &[]).unwrap();
        log.packet(ns(30, 1), 100, &[ns(50, 0), ns(50, 0)]).unwrap();
        log.packet(ns(40, 0), 100, &[ns(60, 0)]).unwrap();
        let text = String::from_utf8(log.finish().unwrap()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[3], format!("# init timestamp: {init_ms}"));
        assert_eq!(lines[4], "# base timestamp: 0");
        assert!(lines[..5].iter().all(|l| l.starts_with("# ")), "{text}");
        let want = mahimahi_lines(&[
            (5, '+', 1500, 0),
            (10, '+', 60, 0),
            (25, '-', 1500, 20),
            (30, '+', 86, 0),
            (40, '+', 86, 0),
            (50, '-', 86, 20),
            (50, '-', 86, 20),
            (60, '-', 86, 20),
        ]);
        assert_eq!(
            lines[5..],
            want.iter().map(String::as_str).collect::<Vec<_>>()[..]
        );
    }
}

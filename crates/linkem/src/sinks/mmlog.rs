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
//! T # BYTES             a delivery opportunity (the link's capacity)
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
//!
//! The file is at its name from the start (`OutputFile::publish`) and the
//! writer flushes every [`FLUSH_INTERVAL`]: a run killed by SIGKILL leaves
//! the log of all but its last second or so (its held departures and the
//! `#` lines after its last written line are lost with it).
//!
//! # Capacity (`#` lines)
//! mahimahi writes `T # 1504` for every delivery opportunity of its trace,
//! used or not, and `mm-throughput-graph` draws the capacity from them (and
//! divides by their sum: it dies on a log that has none). Here, from the
//! link's start configuration:
//!
//! - a `trace` link: one `T_k # 1504` per opportunity k, T_k = ⌊(t0 +
//!   offset of k) / 10⁶⌋ − init_ms with the trace formula of
//!   [`linkem_core::trace`] and t0 the link's start (the stage's, given by
//!   [`Tap::start`]), from t0 to the end of the run (a `trace-once` to its
//!   last line): what mahimahi's log holds for the same trace;
//! - a `rate R` link: one synthetic line per ms from t0, `T # B_T` with B_T
//!   the bytes R carries in that ms (⌊R·(m+1)/8000⌋ − ⌊R·m/8000⌋ for the m-th
//!   ms, so any span sums exactly): a rate has no opportunities, but
//!   mahimahi's users graph a constant-rate link as a trace with a line per
//!   ms and expect its capacity curve. One line per ms, whatever the rate,
//!   keeps the log at 1000 such lines a second (1504-byte opportunities of a
//!   10 Gbit/s link would be 830,000). The bytes are of the wire (the rate
//!   counts frames and their overhead), the `+`/`-` bytes are IP packets';
//! - a link with neither (no rate limit): no `#` lines.
//!
//! The `#` lines are made by the writer thread from the time of the lines it
//! writes anyway (every opportunity up to the next line's time, then up to
//! the instant the run ended), never on the packet path; they stream, so the
//! memory they take is bounded. They follow the start configuration: a
//! `schedule` or a `linkem ctl` change of the rate or trace is not followed.

use crate::sinks::events::Offer;
use linkem_core::config::LinkConfig;
use linkem_core::fate::Fate;
use linkem_core::model::Change;
use linkem_core::node::Decision;
use linkem_core::rules::Side;
use linkem_core::trace::{Trace, OPPORTUNITY_BYTES};
use linkem_runtime::pipeline::Tap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Bytes of the Ethernet header, not counted (mahimahi counts IP packets).
pub const ETHERNET_HEADER_BYTES: u32 = 14;
/// Decisions waiting for the writer at most.
const QUEUE_RECORDS: usize = 1 << 16;
/// How often the writer flushes what it wrote: a run killed (SIGKILL, a
/// crash) leaves its log readable up to about this long before the end.
pub const FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

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
    /// What the `#` lines describe, if the link has a capacity.
    pub capacity: Option<Capacity>,
}

/// What a log's `#` lines describe: the link's capacity (module doc).
#[derive(Debug, Clone, PartialEq)]
pub enum Capacity {
    /// A trace's delivery opportunities, 1504 bytes each.
    Trace(Arc<Trace>),
    /// A rate, bit/s: one line per ms.
    Rate(u64),
}

impl Capacity {
    /// The capacity of a link's start configuration; `None` without a rate or a trace.
    pub fn of(link: &LinkConfig) -> Option<Capacity> {
        match (&link.trace, link.rate_bps) {
            (Some(t), _) => Some(Capacity::Trace(t.clone())),
            (None, Some(bps)) => Some(Capacity::Rate(bps)),
            (None, None) => None,
        }
    }
}

/// Where a log's `#` lines stand.
struct Opportunities {
    capacity: Capacity,
    /// The link's start, ns (the first event's time until the stage gives it).
    t0_ns: Option<u64>,
    /// The next opportunity (trace) or ms since t0 (rate) to write.
    next: u64,
    /// No line after this ms (the end of the run, once known).
    until_ms: u64,
}

impl Opportunities {
    /// The next line's (ms since the epoch, bytes), if any is left.
    fn peek(&self) -> Option<(u64, u64)> {
        let t0 = self.t0_ns?;
        let (at_ns, bytes) = match &self.capacity {
            Capacity::Trace(trace) => (
                t0.checked_add(trace.opportunity_ns(self.next)?)?,
                u64::from(OPPORTUNITY_BYTES),
            ),
            Capacity::Rate(bps) => {
                let carried = |ms: u64| (u128::from(*bps) * u128::from(ms) / 8000) as u64;
                let at = t0.checked_add(self.next.checked_mul(1_000_000)?)?;
                (at, carried(self.next + 1) - carried(self.next))
            }
        };
        let ms = at_ns / 1_000_000;
        (ms <= self.until_ms).then_some((ms, bytes))
    }
}

/// One direction's log, written in time order.
pub struct MmLog<W: Write> {
    out: W,
    init_ms: u64,
    /// (time ms, bytes, delay ms) of departures not yet written.
    pending: BinaryHeap<Reverse<(u64, u32, u64)>>,
    /// The `#` lines still to write, for a link with a capacity.
    opportunities: Option<Opportunities>,
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
            opportunities: h.capacity.clone().map(|capacity| Opportunities {
                capacity,
                t0_ns: None,
                next: 0,
                until_ms: u64::MAX,
            }),
        })
    }

    /// Hands what was written to the output (`Write::flush`).
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    /// The link started at `t0_ns`: its `#` lines count from there. Given
    /// before any packet; without it they count from the first packet.
    pub fn start(&mut self, t0_ns: u64) {
        if let Some(o) = self.opportunities.as_mut() {
            o.t0_ns.get_or_insert(t0_ns);
        }
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
        self.start(arrival_ns);
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

    /// Writes the opportunities and departures up to `t_ms`, in time order;
    /// at one ms an opportunity goes first, as mahimahi writes the `#` line
    /// of the opportunity that carries a packet before its `-` line.
    fn flush_until(&mut self, t_ms: u64) -> std::io::Result<()> {
        loop {
            let opportunity = self
                .opportunities
                .as_ref()
                .and_then(Opportunities::peek)
                .map(|(ms, bytes)| (ms.saturating_sub(self.init_ms), bytes));
            let departure = self.pending.peek().map(|r| r.0);
            match (opportunity, departure) {
                (Some((at, bytes)), d) if at <= t_ms && d.is_none_or(|d| at <= d.0) => {
                    if let Some(o) = self.opportunities.as_mut() {
                        o.next += 1;
                    }
                    writeln!(self.out, "{at} # {bytes}")?;
                }
                (_, Some((left, bytes, delay))) if left <= t_ms => {
                    self.pending.pop();
                    writeln!(self.out, "{left} - {bytes} {delay}")?;
                }
                _ => return Ok(()),
            }
        }
    }

    /// Writes the departures still held and the opportunities up to
    /// `end_ns`, the instant the run ended; returns the output.
    pub fn finish(mut self, end_ns: u64) -> std::io::Result<W> {
        if let Some(o) = self.opportunities.as_mut() {
            o.until_ms = end_ns / 1_000_000;
        }
        self.flush_until(u64::MAX)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

enum Record {
    /// The link's start ([`Tap::start`]).
    Start(u64),
    Packet {
        side: Side,
        arrival_ns: u64,
        len_bytes: u32,
        release_ns: u64,
        copies: u8,
    },
}

/// The stage's end: copies what the logs need into the channel.
pub struct LogTap {
    out: Offer<Record>,
}

impl Tap for LogTap {
    fn frame(&mut self, _side: Side, _ts_ns: u64, _bytes: &[u8]) {}

    #[inline]
    fn decision(&mut self, arrival_ns: u64, len_bytes: u32, d: &Decision) {
        let copies = if d.fate == Fate::Delivered {
            1 + d.duplicate as u8
        } else {
            0
        };
        self.out.offer_with(|| Record::Packet {
            side: d.side,
            arrival_ns,
            len_bytes,
            release_ns: d.release_ns,
            copies,
        });
    }

    fn changes(&mut self, _at_ns: u64, _changes: &[Change]) {}

    fn start(&mut self, t0_ns: u64) {
        self.out.offer_with(|| Record::Start(t0_ns));
    }
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
    let (out, rx, skipped) = Offer::<Record>::channel(QUEUE_RECORDS);
    let thread = std::thread::Builder::new()
        .name("linkem-log".into())
        .spawn(move || {
            let mut logs = logs;
            let mut flush_at = std::time::Instant::now() + FLUSH_INTERVAL;
            loop {
                let wait = flush_at.saturating_duration_since(std::time::Instant::now());
                let r = match rx.recv_timeout(wait) {
                    Ok(r) => Some(r),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                };
                if std::time::Instant::now() >= flush_at {
                    for log in logs.iter_mut().flatten() {
                        log.flush()?;
                    }
                    flush_at = std::time::Instant::now() + FLUSH_INTERVAL;
                }
                let Some(r) = r else { continue };
                match r {
                    Record::Start(t0_ns) => logs.iter_mut().flatten().for_each(|l| l.start(t0_ns)),
                    Record::Packet {
                        side,
                        arrival_ns,
                        len_bytes,
                        release_ns,
                        copies,
                    } => {
                        if let Some(log) = logs[side.index()].as_mut() {
                            let releases = [release_ns; 2];
                            log.packet(arrival_ns, len_bytes, &releases[..copies as usize])?;
                        }
                    }
                }
            }
            // The channel closes when the stage has stopped: the run's end.
            let end_ns = linkem_runtime::clock::now_ns();
            let [a, b] = logs;
            Ok([
                a.map(|l| l.finish(end_ns)).transpose()?,
                b.map(|l| l.finish(end_ns)).transpose()?,
            ])
        })?;
    Ok((LogTap { out }, LogWriter { thread, skipped }))
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
            capacity: None,
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
        let text = String::from_utf8(log.finish(ns(100, 0)).unwrap()).unwrap();
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

    fn header(init_ms: u64, capacity: Option<Capacity>) -> LogHeader {
        LogHeader {
            link_name: "uplink".into(),
            link: "trace t".into(),
            file: "up.log".into(),
            command_line: "linkem shell trace t -- true".into(),
            init_ms,
            capacity,
        }
    }

    /// What a run killed now would leave (SIGKILL runs no destructor, so
    /// the file holds what the writer flushed): the header and the lines
    /// written so far, at the log's own name, within a few flush intervals.
    #[test]
    fn a_live_log_is_readable_at_its_name_while_the_run_goes() {
        use linkem_io::outfile::OutputFile;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("up.log");
        let mut file = OutputFile::create(&path, 1 << 20).unwrap();
        file.publish().unwrap();
        let init_ms = 1_000;
        let log = MmLog::new(file, &header(init_ms, None)).unwrap();
        let (mut tap, writer) = start([Some(log), None]).unwrap();
        let ns = |ms: u64| (init_ms + ms) * 1_000_000;
        tap.start(ns(0));
        let decision = |release_ms: u64| Decision {
            tag: 0,
            fate: Fate::Delivered,
            side: Side::A,
            queue_packets: 0,
            queue_bytes: 0,
            release_ns: ns(release_ms),
            duplicate: false,
            corrupt_bits: Vec::new(),
            rule: None,
            pipe: None,
            flow_id: 0,
            hops: 1,
            queue: None,
            ce: false,
        };
        tap.decision(ns(1), 114, &decision(3));
        tap.decision(ns(5), 214, &decision(6));
        let wanted = ["# base timestamp: 0", "1 + 100", "3 - 100 2", "5 + 200"];
        let deadline = std::time::Instant::now() + FLUSH_INTERVAL * 10;
        let text = loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if wanted.iter().all(|w| text.contains(w)) {
                break text;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "after {:?} the file holds only: {text:?}",
                FLUSH_INTERVAL * 10
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        // The departure at 6 ms waits for a later arrival or the end.
        assert!(!text.contains("6 - 200"), "{text}");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no hidden temporary file beside it");
        drop(tap);
        let (files, skipped) = writer.finish().unwrap();
        assert_eq!(skipped, 0);
        for f in files.into_iter().flatten() {
            f.commit().unwrap();
        }
        assert!(std::fs::read_to_string(&path)
            .unwrap()
            .contains("6 - 200 1"));
    }

    /// A trace of opportunities at 0, 0, 5 and 10 ms (looping every 10 ms:
    /// 10, 10, 15, 20, ...) from a link started 3.5 ms into the run: one `# 1504` line per
    /// opportunity up to the end, before the `-` line of the packet an
    /// opportunity carries, as mahimahi's LinkQueue writes them.
    #[test]
    fn a_trace_link_logs_each_opportunity() {
        let init_ms = 1_700_000_000_000u64;
        let ns = |us: u64| init_ms * 1_000_000 + us * 1000;
        let trace = Arc::new(Trace::parse("t", "0\n0\n5\n10\n", false).unwrap());
        let mut log =
            MmLog::new(Vec::new(), &header(init_ms, Some(Capacity::Trace(trace)))).unwrap();
        log.start(ns(3_500));
        // A packet at 9 ms carried by the opportunity at 3.5 + 10 ms.
        log.packet(ns(9_000), 114, &[ns(13_500)]).unwrap();
        let text = String::from_utf8(log.finish(ns(25_000)).unwrap()).unwrap();
        let events: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            events,
            [
                "3 # 1504",
                "3 # 1504",
                "8 # 1504",
                "9 + 100",
                "13 # 1504",
                "13 # 1504",
                "13 # 1504",
                "13 - 100 4",
                "18 # 1504",
                "23 # 1504",
                "23 # 1504",
                "23 # 1504"
            ]
        );
        // And `linkem plot` reads them as its capacity.
        let read = crate::tools::plot::Log::parse(&text, "up.log").unwrap();
        assert_eq!(read.opportunities.len(), 10);
        assert!(read.opportunities.iter().all(|o| o.1 == 1504));
        let series = crate::tools::plot::throughput_series(&read, 10);
        assert!(series[0].0.starts_with("Capacity"), "{:?}", series[0].0);
        // Bins [0, 10) ms and [10, 20) ms: three opportunities, then three.
        assert_eq!(series[0].1[0].1, 3.0 * 1504.0 * 8.0 / 0.01 / 1e6);
    }

    /// A rate link has one synthetic line per ms, the bytes summing exactly
    /// to what the rate carries; `trace-once` stops at its last line.
    #[test]
    fn a_rate_link_logs_its_bytes_per_ms_and_a_trace_once_ends() {
        let init_ms = 1_000u64;
        let ns = |ms: u64| (init_ms + ms) * 1_000_000;
        let mut log =
            MmLog::new(Vec::new(), &header(init_ms, Some(Capacity::Rate(12_345)))).unwrap();
        log.start(ns(2));
        let text = String::from_utf8(log.finish(ns(1001)).unwrap()).unwrap();
        let lines: Vec<(u64, u64)> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let w: Vec<&str> = l.split(' ').collect();
                assert_eq!(w[1], "#", "{l}");
                (w[0].parse().unwrap(), w[2].parse().unwrap())
            })
            .collect();
        assert_eq!(lines.len(), 1000, "one line per ms from 2 to 1001 ms");
        assert_eq!(lines[0], (2, 1));
        assert_eq!(lines.iter().map(|l| l.1).sum::<u64>(), 12_345 / 8);
        let once = Arc::new(Trace::parse("t", "1\n4\n", true).unwrap());
        let mut log =
            MmLog::new(Vec::new(), &header(init_ms, Some(Capacity::Trace(once)))).unwrap();
        log.start(ns(0));
        let text = String::from_utf8(log.finish(ns(100)).unwrap()).unwrap();
        let events: Vec<&str> = text.lines().filter(|l| !l.starts_with("# ")).collect();
        assert_eq!(events, ["1 # 1504", "4 # 1504"]);
    }
}

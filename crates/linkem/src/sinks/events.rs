//! `linkem bridge --events FILE`: every decision of the live model, one line
//! each in the one `--events` format ([`linkem_core::EVENTS_HEADER`],
//! [`linkem_core::write_event`]), as `linkem replay` writes them.
//!
//! Off the packet path: the live stage only copies each decision into a
//! bounded channel ([`QUEUE_RECORDS`]); a writer thread formats and writes
//! them. When the channel is full the decision is skipped and counted
//! (`events_skipped`), never waited for: the file then lacks lines, which the
//! bridge reports at exit. Stage-level fates (backpressure, late, tx-error,
//! flushed, too-big) are not model decisions and have no line.

use linkem_core::model::Change;
use linkem_core::model::{write_event, EVENTS_HEADER};
use linkem_core::node::Decision;
use linkem_core::rules::Side;
use linkem_runtime::pipeline::Tap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Decisions waiting for the writer at most: at 1 Mpps, 65 ms of them.
pub const QUEUE_RECORDS: usize = 1 << 16;

/// One decision as the stage hands it over.
struct Record {
    /// The pair's index in a group's file (0 alone).
    link: u32,
    arrival_ns: u64,
    len_bytes: u32,
    decision: Decision,
}

/// The stage's end: copies decisions into the channel.
pub struct EventsTap {
    out: Offer<Record>,
    link: u32,
}

impl Tap for EventsTap {
    fn frame(&mut self, _side: Side, _ts_ns: u64, _bytes: &[u8]) {}

    #[inline]
    fn decision(&mut self, arrival_ns: u64, len_bytes: u32, d: &Decision) {
        let link = self.link;
        self.out.offer_with(|| Record {
            link,
            arrival_ns,
            len_bytes,
            decision: d.clone(),
        });
    }

    fn changes(&mut self, _at_ns: u64, _changes: &[Change]) {}
}

/// The stage's end of a channel to a writer thread, which it never waits for.
pub(crate) struct Offer<T> {
    /// `None` once the writer has gone: the tap stops copying.
    tx: Option<SyncSender<T>>,
    skipped: Arc<AtomicU64>,
}

// Every pair of a group offers to the one writer (a derive would ask T: Clone).
impl<T> Clone for Offer<T> {
    fn clone(&self) -> Self {
        Offer {
            tx: self.tx.clone(),
            skipped: self.skipped.clone(),
        }
    }
}

impl<T> Offer<T> {
    /// A channel of at most `queue` records: the stage's end, the writer's
    /// end, and the count of records skipped that the writer reports.
    pub(crate) fn channel(queue: usize) -> (Self, Receiver<T>, Arc<AtomicU64>) {
        let (tx, rx) = sync_channel(queue);
        let skipped = Arc::new(AtomicU64::new(0));
        let offer = Offer {
            tx: Some(tx),
            skipped: skipped.clone(),
        };
        (offer, rx, skipped)
    }

    /// Hands the record `make` builds to the writer without waiting: a full
    /// channel skips it (counted). Once the writer has gone (its error is
    /// reported at the end) nothing is built or sent any more.
    #[inline]
    pub(crate) fn offer_with(&mut self, make: impl FnOnce() -> T) {
        let Some(tx) = &self.tx else { return };
        match tx.try_send(make()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
                self.tx = None;
            }
        }
    }
}

/// The writer's end: the thread, and what it reports when it ends.
pub struct EventsWriter<W> {
    thread: JoinHandle<std::io::Result<(W, u64)>>,
    skipped: Arc<AtomicU64>,
}

/// What the events file got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventsSummary {
    /// Lines written.
    pub written: u64,
    /// Decisions with no line (the channel was full, or the writer failed).
    pub skipped: u64,
}

/// Starts the writer thread on `out` (the header first); returns the tap
/// for the stage and the writer to finish once the stage has stopped.
pub fn start<W: Write + Send + 'static>(out: W) -> std::io::Result<(EventsTap, EventsWriter<W>)> {
    start_with(out, QUEUE_RECORDS)
}

fn start_with<W: Write + Send + 'static>(
    out: W,
    queue: usize,
) -> std::io::Result<(EventsTap, EventsWriter<W>)> {
    let (mut taps, writer) = start_writer(out, queue, None)?;
    Ok((taps.remove(0), writer))
}

/// The events file of a group of pairs named `links` (in pair order): one
/// JSON object a line ([`json_event`]), each naming its link, in the order
/// the stage decided them; returns a tap per pair and the one writer.
pub fn start_group<W: Write + Send + 'static>(
    out: W,
    links: Vec<String>,
) -> std::io::Result<(Vec<EventsTap>, EventsWriter<W>)> {
    start_writer(out, QUEUE_RECORDS, Some(links))
}

/// The writer thread of one file: the tab-separated lines of one pair
/// (`links` None), or JSON lines naming each of `links`.
fn start_writer<W: Write + Send + 'static>(
    mut out: W,
    queue: usize,
    links: Option<Vec<String>>,
) -> std::io::Result<(Vec<EventsTap>, EventsWriter<W>)> {
    let (to_writer, rx, skipped) = Offer::<Record>::channel(queue);
    let taps = (0..links.as_ref().map_or(1, Vec::len))
        .map(|i| EventsTap {
            out: to_writer.clone(),
            link: i as u32,
        })
        .collect();
    drop(to_writer);
    let thread = std::thread::Builder::new()
        .name("linkem-events".into())
        .spawn(move || {
            let mut line = String::with_capacity(160);
            if links.is_none() {
                writeln!(out, "{EVENTS_HEADER}")?;
            }
            let mut written = 0u64;
            for r in rx {
                line.clear();
                write_event(&mut line, r.arrival_ns, r.len_bytes, &r.decision);
                match &links {
                    None => out.write_all(line.as_bytes())?,
                    Some(names) => {
                        let name = names.get(r.link as usize).map_or("", String::as_str);
                        writeln!(out, "{}", json_event(name, &line))?;
                    }
                }
                written += 1;
            }
            out.flush()?;
            Ok((out, written))
        })?;
    Ok((taps, EventsWriter { thread, skipped }))
}

/// A decision's line of a group's events file: `{"link":NAME, ...}` and
/// the columns of [`EVENTS_HEADER`] by name, from its tab-separated
/// `--events` line `tsv` (numbers as numbers, `-` as null, the rest as
/// strings; `flow`, hex, always a string). The live group and the replay of its recording both write it
/// here, so their lines of a link compare equal.
pub fn json_event(link: &str, tsv: &str) -> String {
    let names = EVENTS_HEADER.trim_start_matches("# ").split('\t');
    let mut obj = serde_json::Map::new();
    obj.insert("link".into(), link.into());
    for (name, value) in names.zip(tsv.trim_end_matches('\n').split('\t')) {
        // A flow id is hex: a string even when its digits are all decimal.
        let v = if value == "-" {
            serde_json::Value::Null
        } else if let (false, Ok(n)) = (name == "flow", value.parse::<u64>()) {
            n.into()
        } else {
            value.into()
        };
        obj.insert(name.into(), v);
    }
    serde_json::Value::Object(obj).to_string()
}

impl<W> EventsWriter<W> {
    /// Decisions skipped so far.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Waits for the writer to write what it was given (the tap must have
    /// been dropped) and says how it went; gives the file back.
    pub fn finish(self) -> std::io::Result<(W, EventsSummary)> {
        let (out, written) = self
            .thread
            .join()
            .map_err(|_| std::io::Error::other("the events writer panicked"))??;
        let summary = EventsSummary {
            written,
            skipped: self.skipped.load(Ordering::Relaxed),
        };
        Ok((out, summary))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linkem_core::model::{LinkModel, Model};
    use linkem_core::node::PacketIn;
    use linkem_core::rules::FlowKey;
    use linkem_core::{Fate, LinkSpec};
    use std::sync::Mutex;

    /// A writer into shared memory.
    struct Gate(Arc<Mutex<Vec<u8>>>);

    impl Write for Gate {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn decisions(n: u64) -> Vec<Decision> {
        let spec = LinkSpec::parse("delay 1ms loss 20% seed 3").unwrap();
        let mut m = LinkModel::new([spec.link.clone(), spec.link], 3);
        let mut out = Vec::new();
        for i in 0..n {
            let pkt = PacketIn {
                len_bytes: 100,
                key: FlowKey::default(),
                side: Side::A,
                tag: i,
            };
            m.on_arrival(i * 1000, pkt, &mut out);
        }
        out
    }

    #[test]
    fn every_decision_is_a_line_in_the_replay_format() {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let gate = Gate(buf.clone());
        let (mut tap, writer) = start(gate).unwrap();
        let ds = decisions(500);
        for d in &ds {
            tap.decision(d.tag * 1000, 100, d);
        }
        drop(tap);
        let (_, summary) = writer.finish().unwrap();
        assert_eq!(
            summary,
            EventsSummary {
                written: 500,
                skipped: 0
            }
        );
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        let mut expected = format!("{EVENTS_HEADER}\n");
        for d in &ds {
            write_event(&mut expected, d.tag * 1000, 100, d);
        }
        assert_eq!(text, expected);
        assert!(ds.iter().any(|d| d.fate == Fate::Loss));
    }

    /// A writer that waits on a barrier before its first write.
    struct Slow(Arc<std::sync::Barrier>, bool);

    impl Write for Slow {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if !self.1 {
                self.1 = true;
                self.0.wait();
            }
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_full_queue_skips_and_counts_never_blocks() {
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let (mut tap, writer) = start_with(Slow(barrier.clone(), false), 4).unwrap();
        let ds = decisions(100);
        for d in &ds {
            tap.decision(0, 100, d);
        }
        // The writer is stuck on the header: 4 queued, the rest skipped.
        assert_eq!(writer.skipped(), 96);
        barrier.wait();
        drop(tap);
        let (_, summary) = writer.finish().unwrap();
        assert_eq!(
            summary,
            EventsSummary {
                written: 4,
                skipped: 96
            }
        );
    }

    /// A group's file: each pair's decisions as JSON lines naming its link,
    /// each line the columns of its tab-separated line by name.
    #[test]
    fn a_groups_lines_name_their_link_and_hold_the_columns() {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let names = vec!["a1-b1".to_string(), "r1:eth1--r2:eth1".to_string()];
        let (mut taps, writer) = start_group(Gate(buf.clone()), names.clone()).unwrap();
        let ds = decisions(10);
        for (i, d) in ds.iter().enumerate() {
            taps[i % 2].decision(d.tag * 1000, 100, d);
        }
        drop(taps);
        let (_, summary) = writer.finish().unwrap();
        assert_eq!(summary.written, 10);
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 10, "no header: {text}");
        for (i, (v, d)) in lines.iter().zip(&ds).enumerate() {
            assert_eq!(v["link"], names[i % 2].as_str());
            assert_eq!(v["index"], d.tag);
            assert_eq!(v["arrival_ns"], d.tag * 1000);
            assert_eq!(v["len_bytes"], 100);
            assert_eq!(v["fate"], d.fate.to_string());
            assert_eq!(v["side"], "a");
            assert!(v["rule"].is_null());
        }
        let v: serde_json::Value = serde_json::from_str(&json_event(
            "x",
            "1\t2\t3\tdelivered\t9\t0\t0\t1\t-\t-\t1\t0000000000000012\t-\t-\t-\ta\n",
        ))
        .unwrap();
        assert_eq!(v["flow"], "0000000000000012", "a flow id stays a string");
        assert_eq!(v["pipe"], 1);
    }
}

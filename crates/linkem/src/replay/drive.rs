//! The driver loop of a replay: inputs in, decisions settled, frames written in release order.

use crate::args::ReplayArgs;
use crate::process::SignalGuard;
use crate::render::replay_stats::Tally;
use anyhow::{bail, Context, Result};
use linkem_core::model::{write_event, Change, Model, EVENTS_HEADER};
use linkem_core::node::{Decision, PacketIn};
use linkem_core::order::ReleaseQueue;
use linkem_core::rules::{FlowKey, L2Kind, Side};
use linkem_core::Fate;
use linkem_io::capture::{CaptureReader, CaptureWriter, LinkType};
use linkem_io::outfile::OutputFile;
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Instant;

use super::arrival_order;
use super::logs::{LogStart, ReplayLogs};

/// One input to the model, from a capture or a recording.
pub(super) enum Input {
    /// A frame received on `side`, stamped `ts_ns`.
    Frame {
        side: Side,
        ts_ns: u64,
        orig_len: u32,
        data: Vec<u8>,
    },
    /// Changes applied at one instant, in order.
    Changes { at_ns: u64, changes: Vec<Change> },
}

/// Feeds the capture `args.input` to `model`, every packet as received on
/// `side`; writes the output capture and `--events`. Returns the tally and the
/// seconds the replay took.
pub(super) fn replay_capture<M: Model>(
    args: &ReplayArgs,
    model: &mut M,
    side: Side,
    logs: LogStart,
) -> Result<(Tally, f64)> {
    let signals = SignalGuard::install().context("cannot install the signal handler")?;
    let mut reader = CaptureReader::open(&args.input).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (link_type, snaplen) = (reader.link_type(), reader.snaplen());
    let next = || {
        let packet = reader.next_packet()?;
        Some(
            packet
                .map(|p| Input::Frame {
                    side,
                    ts_ns: p.ts_ns,
                    orig_len: p.orig_len,
                    data: p.data,
                })
                .map_err(|e| anyhow::anyhow!("{e}")),
        )
    };
    drive(args, model, link_type, snaplen, &signals, logs, next)
}

/// Feeds the inputs `next` gives to `model` in order; writes the output
/// capture (of `link_type`, `snaplen`) and `--events`. Returns the tally and
/// the seconds the replay took.
pub(super) fn drive<M: Model>(
    args: &ReplayArgs,
    model: &mut M,
    link_type: LinkType,
    snaplen: u32,
    signals: &SignalGuard,
    logs: LogStart,
    mut next: impl FnMut() -> Option<Result<Input>>,
) -> Result<(Tally, f64)> {
    let l2 = frame_kind(model, link_type)?;
    let writer = CaptureWriter::create(&args.output, link_type, snaplen)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let events = args.events.as_deref().map(open_events).transpose()?;
    let logs = ReplayLogs::create(args, logs)?;
    let started = Instant::now();
    let mut r = Replay::new(l2, writer, events);
    r.logs = logs;
    let progress = progress_bar(args);
    let mut backwards = arrival_order::Backwards::default();
    while let Some(input) = next() {
        signals.check()?;
        match input? {
            Input::Frame {
                side,
                ts_ns,
                orig_len,
                data,
            } => {
                backwards.on_packet(ts_ns);
                r.arrive(model, side, ts_ns, orig_len, data)?;
            }
            Input::Changes { at_ns, changes } => r.change(model, at_ns, changes)?,
        }
        r.write_due(model)?;
        if let Some(pb) = &progress {
            if r.tally.arrived.is_multiple_of(65_536) {
                pb.set_position(r.tally.arrived);
            }
        }
    }
    r.drain(model, signals)?;
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    if let Some(w) = backwards.warning(&args.input.display().to_string()) {
        eprintln!("{w}");
    }
    signals.check()?;
    let tally = r.commit()?;
    Ok((tally, started.elapsed().as_secs_f64()))
}

/// How the model's frames are laid out: needed to parse headers and to set a
/// CE mark. A model that reads no header (the plain link) sets no CE mark
/// either, so it replays any link type.
fn frame_kind<M: Model>(model: &M, link_type: LinkType) -> Result<L2Kind> {
    match L2Kind::from_dlt(link_type.dlt()) {
        Some(l2) => Ok(l2),
        None if !model.reads_headers() => Ok(L2Kind::Ethernet),
        None => bail!("link type {link_type} cannot be classified"),
    }
}

/// The `--events` file, with its header line.
fn open_events(path: &Path) -> Result<OutputFile> {
    let mut w = OutputFile::create(path, 1 << 20)?;
    writeln!(w, "{EVENTS_HEADER}").with_context(|| format!("cannot write {}", path.display()))?;
    Ok(w)
}

/// A spinner for long replays on a terminal.
fn progress_bar(args: &ReplayArgs) -> Option<indicatif::ProgressBar> {
    let size = std::fs::metadata(&args.input).map(|m| m.len()).unwrap_or(0);
    (!args.quiet && std::io::stderr().is_terminal() && size > 32 << 20).then(|| {
        let pb = indicatif::ProgressBar::new_spinner();
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {human_pos} packets {per_sec} {elapsed}",
            )
            .expect("the template is a constant"),
        );
        pb
    })
}

/// A frame the model has not decided yet.
struct Undecided {
    /// Its own stamp, for `--events`.
    arrival_ns: u64,
    /// The instant the model was given (the stamp, or a later one when the
    /// capture went back in time), from which its time in the link counts.
    model_ns: u64,
    /// Its length on the wire.
    orig_len: u32,
    /// The bytes captured, written once it is delivered.
    data: Vec<u8>,
}

/// The replay's state between two inputs: see the [module doc](self).
struct Replay {
    l2: L2Kind,
    /// Delivered frames (and copies) by (release time, decision order).
    queue: ReleaseQueue<(u32, Vec<u8>)>,
    /// Frames the model holds, by tag, until their decision.
    held: HashMap<u64, Undecided>,
    /// The frame being offered, with its tag: moved into `held` only when
    /// the model keeps it.
    current: Option<(u64, Undecided)>,
    /// The model's decisions not yet acted upon (taken out and put back, so
    /// one allocation serves every input).
    out: Vec<Decision>,
    /// The last instant given to the model.
    now_ns: u64,

    events: Option<OutputFile>,
    /// `--log-a-to-b`, `--log-b-to-a`.
    logs: Option<ReplayLogs>,
    /// One `--events` line, reused.
    line: String,
    writer: CaptureWriter,
    tally: Tally,
}

impl Replay {
    fn new(l2: L2Kind, writer: CaptureWriter, events: Option<OutputFile>) -> Replay {
        Replay {
            l2,
            queue: ReleaseQueue::new(),
            held: HashMap::new(),
            current: None,
            out: Vec::new(),
            now_ns: 0,
            events,
            logs: None,
            line: String::new(),
            writer,
            tally: Tally::new(),
        }
    }

    /// Offers one frame stamped `ts_ns`, received on `side`, and acts on the
    /// decisions made by then; keeps the frame if its own is yet to come.
    #[inline]
    fn arrive<M: Model>(
        &mut self,
        model: &mut M,
        side: Side,
        ts_ns: u64,
        orig_len: u32,
        data: Vec<u8>,
    ) -> Result<()> {
        self.now_ns = self.now_ns.max(ts_ns);
        let tag = self.tally.arrived;
        self.tally.arrived += 1;
        self.tally.first_arrival_ns.get_or_insert(ts_ns);
        let key = if model.reads_headers() {
            FlowKey::parse(&data, self.l2)
        } else {
            FlowKey::default()
        };
        let pkt = PacketIn {
            len_bytes: orig_len,
            key,
            side,
            tag,
        };
        let frame = Undecided {
            arrival_ns: ts_ns,
            model_ns: self.now_ns,
            orig_len,
            data,
        };
        self.current = Some((tag, frame));
        model.on_arrival(self.now_ns, pkt, &mut self.out);
        self.settle()?;
        if let Some((tag, frame)) = self.current.take() {
            self.held.insert(tag, frame);
        }
        Ok(())
    }

    /// Applies `changes` at `at_ns` (or at the last instant given, if later),
    /// in order: what is due by then runs first, then the changes, with no
    /// poll between them.
    fn change<M: Model>(&mut self, model: &mut M, at_ns: u64, changes: Vec<Change>) -> Result<()> {
        self.now_ns = self.now_ns.max(at_ns);
        model.poll(self.now_ns, &mut self.out);
        self.settle()?;
        for change in changes {
            let line = change.to_string();
            model
                .apply(self.now_ns, change, &mut self.out)
                .with_context(|| format!("change '{line}' at {} ns", self.now_ns))?;
            self.settle()?;
        }
        Ok(())
    }

    /// Acts on the model's decisions in order: counts each, logs it to
    /// `--events`, and queues what is delivered (CE mark and flipped bits
    /// applied, its copy as it arrived) at its release time.
    fn settle(&mut self) -> Result<()> {
        let mut out = std::mem::take(&mut self.out);
        for d in out.drain(..) {
            let frame = match self.current.take() {
                Some((tag, frame)) if tag == d.tag => frame,
                current => {
                    self.current = current;
                    self.held.remove(&d.tag).with_context(|| {
                        format!("internal error: a decision for packet {} not held", d.tag)
                    })?
                }
            };
            self.tally.count(&d, frame.model_ns);
            if let Some(ev) = self.events.as_mut() {
                self.line.clear();
                write_event(&mut self.line, frame.arrival_ns, frame.orig_len, &d);
                ev.write_all(self.line.as_bytes())
                    .with_context(|| format!("cannot write {}", ev.name()))?;
            }
            if let Some(logs) = self.logs.as_mut() {
                let first_ns = self.tally.first_arrival_ns.unwrap_or(frame.arrival_ns);
                logs.decision(first_ns, frame.arrival_ns, frame.orig_len, &d)?;
            }
            if d.fate == Fate::Delivered {
                let mut data = frame.data;
                let copy = d.duplicate.then(|| data.clone());
                d.apply_to_frame(&mut data, self.l2);
                // The original first, then its copy: equal release times
                // leave in push order.
                self.queue.push(d.release_ns, (frame.orig_len, data));
                if let Some(copy) = copy {
                    self.queue.push(d.release_ns, (frame.orig_len, copy));
                }
            }
        }
        self.out = out;
        Ok(())
    }

    /// Writes the frames no later input can precede: released by the last
    /// instant given and by the model's next event.
    #[inline]
    fn write_due<M: Model>(&mut self, model: &mut M) -> Result<()> {
        let horizon_ns = model
            .next_event_ns()
            .map_or(self.now_ns, |e| e.min(self.now_ns));
        while let Some((release_ns, (orig_len, data))) = self.queue.pop_due(horizon_ns) {
            self.write(release_ns, orig_len, &data)?;
        }
        Ok(())
    }

    fn write(&mut self, release_ns: u64, orig_len: u32, data: &[u8]) -> Result<()> {
        self.writer
            .write(release_ns, orig_len, data)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        self.tally.written += 1;
        self.tally.last_release_ns = release_ns;
        Ok(())
    }

    /// After the last input: runs the model's remaining events one at a time
    /// and writes every frame left.
    fn drain<M: Model>(&mut self, model: &mut M, signals: &SignalGuard) -> Result<()> {
        while let Some(t) = model.next_event_ns() {
            signals.check()?;
            self.now_ns = self.now_ns.max(t);
            model.poll(self.now_ns, &mut self.out);
            self.settle()?;
            self.write_due(model)?;
        }
        while let Some((release_ns, (orig_len, data))) = self.queue.pop() {
            self.write(release_ns, orig_len, &data)?;
            if self.tally.written.is_multiple_of(4096) {
                signals.check()?;
            }
        }
        if !self.held.is_empty() {
            bail!("internal error: {} packets left undecided", self.held.len());
        }
        let decided = self.tally.counts.arrived();
        if decided != self.tally.arrived {
            bail!(
                "internal error: {} packets read but {decided} decided",
                self.tally.arrived
            );
        }
        Ok(())
    }

    /// Puts the output capture and `--events` in place; the tally.
    fn commit(self) -> Result<Tally> {
        if let Some(ev) = self.events {
            ev.commit()?;
        }
        if let Some(logs) = self.logs {
            // The replay ends at its last instant: an input, an event or a release.
            logs.commit(self.now_ns.max(self.tally.last_release_ns))?;
        }
        self.writer.finish().map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(self.tally)
    }
}

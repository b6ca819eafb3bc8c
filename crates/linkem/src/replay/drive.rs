//! The driver loop of a replay: inputs in, decisions settled, frames written in release order.

use crate::cli::args::ReplayArgs;
use crate::process::SignalGuard;
use crate::render::replay_stats::Tally;
use anyhow::{bail, Context, Result};
use linkem_core::driver::{Driver, Frame};
use linkem_core::model::{write_event, Change, Model, EVENTS_HEADER};
use linkem_core::node::Decision;
use linkem_core::rules::{FlowKey, L2Kind, Side};
use linkem_core::Fate;
use linkem_io::capture::{CaptureReader, CaptureWriter, LinkType};
use linkem_io::outfile::OutputFile;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Instant;

use super::arrival_order;
use super::in_flight::InFlight;
use super::logs::{LogStart, ReplayLogs};

/// One input to the model, from a capture or a recording.
pub(super) enum Input {
    /// A frame received on `side`, stamped `ts_ns`; its bytes are in the
    /// buffer the input was read into.
    Frame {
        side: Side,
        ts_ns: u64,
        orig_len: u32,
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
    let next = |data: &mut Vec<u8>| {
        let packet = reader.next_packet_into(data)?;
        Some(
            packet
                .map(|p| Input::Frame {
                    side,
                    ts_ns: p.ts_ns,
                    orig_len: p.orig_len,
                })
                .map_err(|e| anyhow::anyhow!("{e}")),
        )
    };
    drive(args, model, link_type, snaplen, &signals, logs, next)
}

/// Feeds the inputs `next` gives to `model` in order (a frame's bytes read
/// into the buffer it is given, one for the whole replay); writes the output
/// capture (of `link_type`, `snaplen`) and `--events`. Returns the tally and
/// the seconds the replay took.
pub(super) fn drive<M: Model>(
    args: &ReplayArgs,
    model: &mut M,
    link_type: LinkType,
    snaplen: u32,
    signals: &SignalGuard,
    logs: LogStart,
    mut next: impl FnMut(&mut Vec<u8>) -> Option<Result<Input>>,
) -> Result<(Tally, f64)> {
    let l2 = frame_kind(model, link_type)?;
    let writer = CaptureWriter::create(&args.output, link_type, snaplen)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let events = args.events.as_deref().map(open_events).transpose()?;
    let logs = ReplayLogs::create(args, logs)?;
    let started = Instant::now();
    let mut r = Replay::new(l2, writer, events);
    r.out.logs = logs;
    let progress = progress_bar(args);
    let mut backwards = arrival_order::Backwards::default();
    let mut data = Vec::new();
    while let Some(input) = next(&mut data) {
        signals.check()?;
        match input? {
            Input::Frame {
                side,
                ts_ns,
                orig_len,
            } => {
                backwards.on_packet(ts_ns);
                r.arrive(model, side, ts_ns, orig_len, &data)?;
            }
            Input::Changes { at_ns, changes } => r.change(model, at_ns, changes)?,
        }
        r.out.write_due(model, r.driver.last_ns())?;
        if let Some(pb) = &progress {
            if r.out.tally.arrived.is_multiple_of(65_536) {
                pb.set_position(r.out.tally.arrived);
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

/// What a decision needs of its packet besides the bytes.
#[derive(Clone, Copy)]
struct Arrival {
    /// Its own stamp, for `--events`.
    arrival_ns: u64,
    /// The instant the model was given (the stamp, or a later one when the
    /// capture went back in time), from which its time in the link counts.
    model_ns: u64,
    /// Its length on the wire.
    orig_len: u32,
}

/// A frame the model has not decided yet.
struct Undecided {
    arrival: Arrival,
    /// The bytes captured, written once it is delivered.
    data: Vec<u8>,
}

/// The replay's state between two inputs: see the [module doc](self).
struct Replay {
    /// Tags, instants and the frames the model holds until their decision.
    driver: Driver<Undecided>,
    /// Where decisions go; apart from the driver so that a decision it lends
    /// is acted on in place.
    out: Outputs,
}

/// What a replay writes and counts.
struct Outputs {
    l2: L2Kind,
    /// Delivered frames (and copies) by (release time, decision order).
    queue: InFlight,
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
            driver: Driver::new(0),
            out: Outputs {
                l2,
                queue: InFlight::default(),
                events,
                logs: None,
                line: String::new(),
                writer,
                tally: Tally::new(),
            },
        }
    }

    /// Offers one frame stamped `ts_ns`, received on `side`, and acts on the
    /// decisions made by then; the driver holds the frame if its own is yet
    /// to come.
    #[inline]
    fn arrive<M: Model>(
        &mut self,
        model: &mut M,
        side: Side,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
    ) -> Result<()> {
        let model_ns = self.driver.arrival_ns(ts_ns);
        self.out.tally.arrived += 1;
        self.out.tally.first_arrival_ns.get_or_insert(ts_ns);
        let key = if model.reads_headers() {
            FlowKey::parse(data, self.out.l2)
        } else {
            FlowKey::default()
        };
        // Most packets are decided at their arrival: the frame is copied to
        // the driver's store only when its decision did not come with it.
        let arrival = Arrival {
            arrival_ns: ts_ns,
            model_ns,
            orig_len,
        };
        self.driver.offer(model, model_ns, side, orig_len, key);
        self.settle(Some((arrival, data)))?;
        if let Some(tag) = self.driver.undecided() {
            let data = data.to_vec();
            self.driver.hold(tag, Undecided { arrival, data });
        }
        Ok(())
    }

    /// Applies `changes` at `at_ns` (or at the last instant given, if later),
    /// in order: what is due by then runs first, then the changes, with no
    /// poll between them.
    fn change<M: Model>(&mut self, model: &mut M, at_ns: u64, changes: Vec<Change>) -> Result<()> {
        let at_ns = self.driver.input_ns(at_ns);
        let at = self.driver.begin_changes(model, at_ns);
        self.settle(None)?;
        for change in changes {
            let line = change.to_string();
            self.driver
                .apply(model, at, change)
                .with_context(|| format!("change '{line}' at {at_ns} ns"))?;
            self.settle(None)?;
        }
        Ok(())
    }

    /// Acts on the driver's decisions in order, `offered` the packet just
    /// offered (its decision comes at most once).
    #[inline]
    fn settle(&mut self, offered: Option<(Arrival, &[u8])>) -> Result<()> {
        while let Some((d, at)) = self.driver.next_decision_ref() {
            match (at, offered) {
                (Frame::Offered, Some((arrival, data))) => self.out.act(d, arrival, data)?,
                (Frame::Held(frame), _) => self.out.act(d, frame.arrival, &frame.data)?,
                _ => bail!("internal error: a decision for packet {} not held", d.tag),
            }
        }
        Ok(())
    }

    /// After the last input: runs the model's remaining events one at a time
    /// and writes every frame left.
    fn drain<M: Model>(&mut self, model: &mut M, signals: &SignalGuard) -> Result<()> {
        while let Some(t) = model.next_event_ns() {
            signals.check()?;
            let t = self.driver.input_ns(t);
            self.driver.poll(model, t);
            self.settle(None)?;
            self.out.write_due(model, self.driver.last_ns())?;
        }
        self.out.write_by(u64::MAX, Some(signals))?;
        if self.driver.held() > 0 {
            bail!(
                "internal error: {} packets left undecided",
                self.driver.held()
            );
        }
        let decided = self.out.tally.counts.arrived();
        if decided != self.out.tally.arrived {
            bail!(
                "internal error: {} packets read but {decided} decided",
                self.out.tally.arrived
            );
        }
        Ok(())
    }

    /// Puts the output capture and `--events` in place; the tally.
    fn commit(self) -> Result<Tally> {
        if let Some(ev) = self.out.events {
            ev.commit()?;
        }
        if let Some(logs) = self.out.logs {
            // The replay ends at its last instant: an input, an event or a release.
            logs.commit(self.driver.last_ns().max(self.out.tally.last_release_ns))?;
        }
        self.out
            .writer
            .finish()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(self.out.tally)
    }
}

impl Outputs {
    /// Acts on one decision: counts it, logs it to `--events`, and queues
    /// what is delivered (CE mark and flipped bits applied, its copy as it
    /// arrived) at its release time.
    #[inline]
    fn act(&mut self, d: &Decision, frame: Arrival, data: &[u8]) -> Result<()> {
        self.tally.count(d, frame.model_ns);
        if let Some(ev) = self.events.as_mut() {
            self.line.clear();
            write_event(&mut self.line, frame.arrival_ns, frame.orig_len, d);
            ev.write_all(self.line.as_bytes())
                .with_context(|| format!("cannot write {}", ev.name()))?;
        }
        if let Some(logs) = self.logs.as_mut() {
            let first_ns = self.tally.first_arrival_ns.unwrap_or(frame.arrival_ns);
            logs.decision(first_ns, frame.arrival_ns, frame.orig_len, d)?;
        }
        if d.fate == Fate::Delivered {
            let l2 = self.l2;
            // The original first, then its copy: equal release times
            // leave in push order.
            let edit = |f: &mut [u8]| {
                if d.ce || !d.corrupt_bits.is_empty() {
                    d.apply_to_frame(f, l2)
                }
            };
            self.queue.push(d.release_ns, frame.orig_len, data, edit);
            if d.duplicate {
                self.queue.push(d.release_ns, frame.orig_len, data, |_| ());
            }
        }
        Ok(())
    }

    /// Writes the frames no later input can precede: released by the last
    /// instant given and by the model's next event.
    #[inline]
    fn write_due<M: Model>(&mut self, model: &mut M, last_ns: u64) -> Result<()> {
        let horizon_ns = model.next_event_ns().map_or(last_ns, |e| e.min(last_ns));
        self.write_by(horizon_ns, None)
    }

    /// Writes the frames released by `horizon_ns`, looking for a signal
    /// every 4096 frames when given `signals`.
    fn write_by(&mut self, horizon_ns: u64, signals: Option<&SignalGuard>) -> Result<()> {
        let (writer, tally) = (&mut self.writer, &mut self.tally);
        self.queue
            .write_due(horizon_ns, |release_ns, orig_len, data| {
                writer
                    .write(release_ns, orig_len, data)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                tally.written += 1;
                tally.last_release_ns = release_ns;
                match signals {
                    Some(s) if tally.written.is_multiple_of(4096) => s.check(),
                    _ => Ok(()),
                }
            })
    }
}

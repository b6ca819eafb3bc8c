//! `linkem replay IN OUT`: a capture goes in, the capture as the emulated link
//! or node would deliver it comes out.
//!
//! # One driver for every model
//! The packets go through a [`Model`], the one interface of
//! [`linkem_core::model`]: a [`LinkModel`] for link words (every packet taken
//! as received on side a, so side a's link, seeded from direction 0, decides
//! them all), a [`Node`] for `--rules FILE` or a config's `rules` (every
//! packet on the side `--rules-side` names; the rule file may also come from
//! the TOML config as `rules = """..."""`, and the only link word allowed
//! beside rules is `seed`). The driver is generic over the model and
//! monomorphised, so the plain link pays for no rule machinery: it never
//! parses a header ([`Model::reads_headers`]) and has no events to poll.
//!
//! # Recordings
//! When IN is a recording directory of a live run (`linkem bridge --record`,
//! [`linkem_io::recording`]), the model is the one its `recording.json`
//! describes (seed, link words or `start.rules`, options), and the inputs are
//! the run's: every frame with its side and stamp, and every change at its
//! instant (a poll at that instant, then the changes of its batch in order),
//! so the decisions, OUT and `--events` are those of the run.
//!
//! # Instants
//! Inputs reach the model with non-decreasing instants: a packet stamped
//! earlier than one read before it is given to the model at the latest earlier
//! stamp ([`crate::arrival_order`]); its `--events` line keeps its own stamp.
//!
//! # Output order
//! Delivered frames (a duplicate right after its original) leave in (release
//! time, decision order), kept in one [`ReleaseQueue`] of the frames in
//! flight. A frame is written once no later input can release one earlier
//! than it: every later decision comes from an arrival at or after the last
//! instant given to the model, or from a model event at or after
//! [`Model::next_event_ns`], and is released no earlier than that instant.
//! So frames released by the horizon = min(last instant, next event) are
//! written after each input, and memory holds the frames in flight, not the
//! file. After the last packet the model's remaining events run one at a time
//! (a poll at each next event), as model time reaches them in a live run.
//!
//! # Undecided frames
//! A node may hold a packet (a scheduler's queue, a hop of a multi-hop path):
//! its frame waits by tag until the decision. Most packets are decided at
//! their arrival, so the frame being offered is moved into the tag-indexed
//! store only when its decision did not come with the arrival.
//!
//! # Events
//! `--events` has one line per decision, in decision order, in the one format
//! of every model and front end ([`EVENTS_HEADER`], [`write_event`]).
//!
//! # Link logs
//! `--log-a-to-b FILE` / `--log-b-to-a FILE` write mahimahi's link log
//! ([`crate::sinks::mmlog`], as the bridge and the shell do) of the packets received
//! on that side, a line per decision: `T + BYTES` at its arrival, `T - BYTES
//! DELAY` at each copy's release. T counts ms from the capture's first packet
//! (`init timestamp` is that packet's stamp in epoch ms, as mahimahi's is the
//! instant its shell started), so the log of a capture made live and the log
//! of its replay line up.

use crate::cli::args::{base_inputs, outputs, ReplayArgs, RulesArgs};
use crate::files::{config_has_rules, link_spec_reading, load_rules_reading, rules_source};
use crate::process::{fresh_seed, SignalGuard};
use crate::render::replay_stats::{print_stats, report, Tally};
use anyhow::{bail, Context, Result};
use linkem_core::model::{write_event, Change, LinkModel, Model, EVENTS_HEADER};
use linkem_core::node::{Decision, Node, NodeConfig, PacketIn};
use linkem_core::order::ReleaseQueue;
use linkem_core::rules::{parse_rules, FlowKey, L2Kind, Side};
use linkem_core::Fate;
use linkem_core::{Dialect, LinkSpec};
use linkem_io::capture::{CaptureReader, CaptureWriter, LinkType};
use linkem_io::outfile::{self, FileUse, OutputFile};
use linkem_io::recording::{self, RecordedChange, RecordedInput, Recording, Start};
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Runs `linkem replay` as its arguments ask: a recording directory through
/// the model it recorded, else through rules when `--rules` or a config's
/// `rules` is given, else through the link words.
pub fn run(args: &ReplayArgs) -> Result<()> {
    if recording::is_recording(&args.input) {
        return run_recording(args);
    }
    if rules_wanted(args, &args.rules)? {
        run_rules(args, &args.rules)
    } else {
        run_link(args)
    }
}

/// Whether this replay runs rules (`--rules` or a config with `rules`).
fn rules_wanted(args: &ReplayArgs, rules: &RulesArgs) -> Result<bool> {
    if rules.file.is_some() {
        return Ok(true);
    }
    Ok(args.config.as_deref().is_some_and(config_has_rules))
}

/// The replay through the link words: every packet on side a.
fn run_link(args: &ReplayArgs) -> Result<()> {
    let mut tables = Vec::new();
    let spec = link_spec_reading(args.config.as_deref(), &args.words, &mut tables)?;
    let seed = spec.seed.unwrap_or_else(fresh_seed);
    if spec.seed.is_none() {
        eprintln!("linkem: seed {seed} (add 'seed {seed}' to repeat this run exactly)");
    }
    let link_text = spec.link.to_string();

    // Before anything is opened for writing: an output must not be an input.
    let mut inputs = base_inputs(args);
    inputs.extend(
        tables
            .into_iter()
            .map(|p| FileUse::new("distribution table named in the link words", p)),
    );
    outfile::check_distinct(&inputs, &outputs(args))?;

    let logs = LogStart::of_links([&spec.link, &spec.link], None);
    let mut model = LinkModel::new([spec.link.clone(), spec.link], seed);
    let (tally, secs) = replay_capture(args, &mut model, Side::A, logs)?;
    print_stats(args, &link_text, seed, &tally, secs);
    Ok(())
}

/// The replay through rules: every packet on the side `--rules-side` names.
fn run_rules(args: &ReplayArgs, rargs: &RulesArgs) -> Result<()> {
    let (mut node, seed, named) = build_node(args, rargs)?;
    // Before anything is opened for writing: an output must not be an input.
    let mut inputs = base_inputs(args);
    inputs.extend(rargs.file.iter().map(|p| FileUse::new("--rules", p)));
    inputs.extend(
        named
            .into_iter()
            .map(|p| FileUse::new("file named in the rules", p)),
    );
    outfile::check_distinct(&inputs, &outputs(args))?;
    let (tally, secs) = replay_capture(args, &mut node, rargs.side.into(), LogStart::default())?;
    report(args, &node, seed, &tally, secs);
    Ok(())
}

/// The node of the rules (from `--rules` or the config), the seed it draws
/// from (the one given, or a fresh one, printed so the run can be repeated) and
/// the files the rules named.
fn build_node(args: &ReplayArgs, rargs: &RulesArgs) -> Result<(Node, u64, Vec<PathBuf>)> {
    let (text, seed) = rules_source(args.config.as_deref(), rargs.file.as_deref(), &args.words)?
        .context("internal error: rules wanted but none found")?;
    let base = rargs.file.as_deref().and_then(Path::parent);
    let text_file = rargs.file.as_deref().or(args.config.as_deref());
    let mut named = Vec::new();
    let set = load_rules_reading(
        &text,
        text_file,
        base,
        ["a", "b"],
        &mut HashMap::new(),
        &mut named,
    )?;
    let seed = seed.unwrap_or_else(|| {
        let s = fresh_seed();
        eprintln!("linkem: seed {s} (add 'seed {s}' to repeat this run exactly)");
        s
    });
    let node = Node::new(
        set,
        NodeConfig {
            seed,
            max_flows: rargs.max_flows,
            max_flow_bytes: rargs.max_flow_memory,
            ..Default::default()
        },
    );
    Ok((node, seed, named))
}

/// One input to the model, from a capture or a recording.
enum Input {
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
fn replay_capture<M: Model>(
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
fn drive<M: Model>(
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
    let mut backwards = crate::arrival_order::Backwards::default();
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

/// What the link logs of a replay start from: each direction's capacity
/// (the `#` lines, as the live logs write them: [`crate::sinks::mmlog`]) and the
/// link's start when a recording stores it.
#[derive(Default)]
struct LogStart {
    capacity: [Option<crate::sinks::mmlog::Capacity>; 2],
    /// The live link's start (a recording's `start_ns`): the origin of the
    /// `#` lines, as of the model's traces, and of the logs' times. Without
    /// it both count from the first packet.
    start_ns: Option<u64>,
}

impl LogStart {
    fn of_links(links: [&linkem_core::LinkConfig; 2], start_ns: Option<u64>) -> LogStart {
        LogStart {
            capacity: links.map(crate::sinks::mmlog::Capacity::of),
            start_ns,
        }
    }
}

/// The link logs asked for: created (and so checked) before the replay
/// starts, their headers written at the first packet; their times count
/// from the link's start where a recording stores it, else from that
/// packet's stamp.
struct ReplayLogs {
    /// `[a-to-b, b-to-a]` files until the first packet.
    files: [Option<OutputFile>; 2],
    logs: [Option<crate::sinks::mmlog::MmLog<OutputFile>>; 2],
    /// The model, in the header's words.
    link: String,
    start: LogStart,
}

impl ReplayLogs {
    fn create(args: &ReplayArgs, start: LogStart) -> Result<Option<ReplayLogs>> {
        if args.log_a_to_b.is_none() && args.log_b_to_a.is_none() {
            return Ok(None);
        }
        let create = |path: &Option<PathBuf>| -> Result<Option<OutputFile>> {
            path.as_deref()
                .map(|p| OutputFile::create(p, 1 << 20).map_err(anyhow::Error::from))
                .transpose()
        };
        let mut link = args.words.join(" ");
        if let Some(config) = &args.config {
            link = format!("config {} {link}", config.display());
        }
        if let Some(rules) = &args.rules.file {
            link = format!("rules {} {link}", rules.display());
        }
        Ok(Some(ReplayLogs {
            files: [create(&args.log_a_to_b)?, create(&args.log_b_to_a)?],
            logs: [None, None],
            link: link.trim().to_string(),
            start,
        }))
    }

    /// Writes the headers, times counting from the link's start or else
    /// `first_ns`.
    fn start(&mut self, first_ns: u64) -> Result<()> {
        let command_line = std::env::args().collect::<Vec<_>>().join(" ");
        for (i, file) in self.files.iter_mut().enumerate() {
            let Some(file) = file.take() else { continue };
            let header = crate::sinks::mmlog::LogHeader {
                link_name: ["uplink", "downlink"][i].into(),
                link: self.link.clone(),
                file: file.name().to_string(),
                command_line: command_line.clone(),
                init_ms: self.start.start_ns.unwrap_or(first_ns) / 1_000_000,
                capacity: self.start.capacity[i].clone(),
            };
            let name = file.name().to_string();
            let mut log = crate::sinks::mmlog::MmLog::new(file, &header)
                .with_context(|| format!("cannot write the link log {name}"))?;
            if let Some(t0_ns) = self.start.start_ns {
                log.start(t0_ns);
            }
            self.logs[i] = Some(log);
        }
        Ok(())
    }

    /// Logs decision `d` of the frame that arrived at `arrival_ns`, the
    /// capture's first at `first_ns`.
    fn decision(
        &mut self,
        first_ns: u64,
        arrival_ns: u64,
        orig_len: u32,
        d: &Decision,
    ) -> Result<()> {
        if self.files.iter().any(Option::is_some) {
            self.start(first_ns)?;
        }
        let side = match d.side {
            Side::A => 0,
            Side::B => 1,
        };
        let Some(log) = self.logs[side].as_mut() else {
            return Ok(());
        };
        let copies = match d.fate {
            Fate::Delivered => 1 + usize::from(d.duplicate),
            _ => 0,
        };
        log.packet(arrival_ns, orig_len, &[d.release_ns; 2][..copies])
            .context("cannot write the link log")
    }

    /// Writes the departures still held and the `#` lines up to `end_ns`,
    /// the replay's last instant, and puts the files in place (a capture
    /// with no packet leaves logs of a header only, times from 0).
    fn commit(mut self, end_ns: u64) -> Result<()> {
        self.start(0)?;
        for log in self.logs.into_iter().flatten() {
            let file = log.finish(end_ns).context("cannot write the link log")?;
            file.commit()?;
        }
        Ok(())
    }
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

/// `linkem replay DIR OUT`: the recording of a live run fed again to the model
/// its `recording.json` describes (seed, link words or start rules, options),
/// every frame with its side and stamp and every change at its instant, so
/// the decisions are the run's. An incomplete recording is replayed as far as
/// it goes, with a warning naming what is missing, and one naming where it was
/// cut when its last record is not whole (a run killed, a full disk).
fn run_recording(args: &ReplayArgs) -> Result<()> {
    let dir = args.input.as_path();
    if !args.words.is_empty() || args.config.is_some() || args.rules.file.is_some() {
        bail!(
            "{} is a recording: the model comes from its {}; give no link words, --config or --rules",
            dir.display(),
            recording::META_FILE
        );
    }
    let mut rec = Recording::open(dir).map_err(|e| anyhow::anyhow!("{e}"))?;
    let meta = rec.meta.clone();
    if let Some(missing) = incomplete(&meta) {
        eprintln!(
            "linkem: warning: {}: the recording is incomplete ({missing}); replaying what it holds",
            dir.display()
        );
    }
    let mut inputs: Vec<FileUse> = [
        recording::META_FILE,
        recording::FRAMES_FILE,
        recording::CHANGES_FILE,
        recording::START_RULES_FILE,
    ]
    .iter()
    .map(|f| FileUse::new("recording", dir.join(f)))
    .collect();
    // Version 2 copied every file the run read: the replay reads those copies
    // (checked by the reader), never the paths as they are now.
    let copied = meta.version >= 2;
    let signals = SignalGuard::install().context("cannot install the signal handler")?;
    let (link_type, snaplen) = (LinkType(meta.link_type), meta.snaplen);
    // The rules name the interfaces by the run's names (`recv IF_A`), as `a`/`b` too.
    let sides = [meta.sides[0].as_str(), meta.sides[1].as_str()];
    match &meta.start {
        Start::Link(_) | Start::Links(_) => {
            let words = match &meta.start {
                Start::Links([ab, ba]) => [ab, ba],
                Start::Link(w) | Start::Rules(w) => [w, w],
            };
            let mut tables = Vec::new();
            let mut spec = |w: &String, side: &str| {
                let spec = if copied {
                    let words: Vec<String> = w.split_whitespace().map(str::to_string).collect();
                    LinkSpec::parse_layers(&[&words], Dialect::Linkem, &mut |name: &str| {
                        start_file(&meta.files, name)
                    })
                    .map_err(|e| anyhow::anyhow!("link words: {e}"))
                } else {
                    link_spec_reading(None, std::slice::from_ref(w), &mut tables)
                };
                spec.with_context(|| format!("{}: start link of {side}", dir.display()))
            };
            let (ab, ba) = (spec(words[0], "a->b")?, spec(words[1], "b->a")?);
            known_options(&meta, &[])?;
            inputs.extend(
                tables
                    .into_iter()
                    .map(|p| FileUse::new("distribution table named in the link words", p)),
            );
            outfile::check_distinct(&inputs, &outputs(args))?;
            let link_text = if ab.link == ba.link {
                ab.link.to_string()
            } else {
                format!("a->b {}; b->a {}", ab.link, ba.link)
            };
            let logs = LogStart::of_links([&ab.link, &ba.link], meta.start_ns);
            let mut model = LinkModel::new([ab.link, ba.link], meta.seed);
            // The live link's start (version 3), the origin of its traces and
            // schedules; an older recording starts them at the first frame.
            if let Some(t0_ns) = meta.start_ns {
                model.start(t0_ns);
            }
            let next = recorded_inputs(&mut rec, dir, sides);
            let (tally, secs) = drive(args, &mut model, link_type, snaplen, &signals, logs, next)?;
            print_stats(args, &link_text, meta.seed, &tally, secs);
        }
        Start::Rules(text) => {
            known_options(&meta, &["max_flows", "max_flow_memory", "one_pass"])?;
            let mut named = Vec::new();
            let start_rules = dir.join(recording::START_RULES_FILE);
            let mut set = if copied {
                parse_rules(text, sides, &mut |name: &str| start_file(&meta.files, name))
                    .map_err(|e| anyhow::anyhow!("{}: rules: {e}", start_rules.display()))?
            } else {
                load_rules_reading(
                    text,
                    Some(&start_rules),
                    Some(dir),
                    sides,
                    &mut HashMap::new(),
                    &mut named,
                )?
            };
            if let Some(one_pass) = option(&meta, "one_pass", serde_json::Value::as_bool)? {
                set.one_pass = one_pass;
            }
            inputs.extend(
                named
                    .into_iter()
                    .map(|p| FileUse::new("file named in the rules", p)),
            );
            outfile::check_distinct(&inputs, &outputs(args))?;
            let defaults = NodeConfig::default();
            let to_usize = |v: &serde_json::Value| v.as_u64().and_then(|n| usize::try_from(n).ok());
            let cfg = NodeConfig {
                seed: meta.seed,
                max_flows: option(&meta, "max_flows", to_usize)?.unwrap_or(defaults.max_flows),
                max_flow_bytes: option(&meta, "max_flow_memory", to_usize)?
                    .unwrap_or(defaults.max_flow_bytes),
                ..defaults
            };
            let mut node = Node::new(set, cfg);
            if let Some(t0_ns) = meta.start_ns {
                node.start(t0_ns);
            }
            let next = recorded_inputs(&mut rec, dir, sides);
            // A node has no one capacity a direction: no `#` lines.
            let logs = LogStart {
                capacity: [None, None],
                start_ns: meta.start_ns,
            };
            let (tally, secs) = drive(args, &mut node, link_type, snaplen, &signals, logs, next)?;
            report(args, &node, meta.seed, &tally, secs);
        }
    }
    for note in rec.cut_short() {
        eprintln!("linkem: warning: {note}");
    }
    Ok(())
}

/// What an incomplete recording misses, in words; None when it is complete.
fn incomplete(meta: &recording::RecordingMeta) -> Option<String> {
    if meta.complete {
        return None;
    }
    let mut missing = Vec::new();
    if let Some(why) = &meta.stopped {
        missing.push(format!("recording stopped: {why}"));
    }
    if meta.skipped > 0 {
        missing.push(format!(
            "{} frames the run fed its core were skipped",
            meta.skipped
        ));
    }
    if missing.is_empty() {
        missing.push(format!(
            "the run did not finish it: {} says complete: false, the frames after the last \
             written are missing",
            recording::META_FILE
        ));
    }
    Some(missing.join("; "))
}

/// Refuses an option the replay does not know: replaying without it would not
/// decide as the run did.
fn known_options(meta: &recording::RecordingMeta, known: &[&str]) -> Result<()> {
    match meta.options.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => bail!(
            "{}: option '{k}' is not one this replay of a {} run knows",
            recording::META_FILE,
            match meta.start {
                Start::Link(_) | Start::Links(_) => "link",
                Start::Rules(_) => "rules",
            }
        ),
        None => Ok(()),
    }
}

/// Option `name` of the recording read by `get`; an error naming it if it is
/// there but not of the kind `get` reads.
fn option<T>(
    meta: &recording::RecordingMeta,
    name: &str,
    get: impl Fn(&serde_json::Value) -> Option<T>,
) -> Result<Option<T>> {
    meta.options
        .get(name)
        .map(|v| {
            get(v).with_context(|| format!("{}: option '{name}' is {v}", recording::META_FILE))
        })
        .transpose()
}

/// The inputs of a recording in order, its changes parsed: control lines by
/// [`parse_change_line_reading`], a whole rule set by [`parse_rules`]. A
/// version-2 recording's changes read the files the run had read by then (the
/// start's, then each reload's over them, as the live control socket reads
/// the files of the running rules) and then the system's tables, as the live
/// run did; a version-1 recording's, what its replay always read.
fn recorded_inputs<'a>(
    rec: &'a mut Recording,
    dir: &'a Path,
    sides_as: [&'a str; 2],
) -> impl FnMut() -> Option<Result<Input>> + 'a {
    let sides = rec.meta.sides.clone();
    let copied = rec.meta.version >= 2;
    let mut read = rec.meta.files.clone();
    move || {
        let input = match rec.next_input()? {
            Ok(input) => input,
            Err(e) => return Some(Err(anyhow::anyhow!("{e}"))),
        };
        Some(match input {
            RecordedInput::Frame {
                side,
                ts_ns,
                orig_len,
                data,
            } => match side {
                0 | 1 => Ok(Input::Frame {
                    side: if side == 0 { Side::A } else { Side::B },
                    ts_ns,
                    orig_len,
                    data,
                }),
                _ => Err(anyhow::anyhow!(
                    "{}: a frame on side {side} (0 or 1)",
                    dir.display()
                )),
            },
            RecordedInput::Change { at_ns, change } => {
                if copied {
                    if let RecordedChange::Rules(_, files) = &change {
                        read.extend(files.iter().map(|(n, t)| (n.clone(), t.clone())));
                    }
                }
                let mut files = |name: &str| match read.get(name) {
                    Some(text) if copied => Ok(text.clone()),
                    _ => linkem_ctl::system_tables(name),
                };
                let changes = match change {
                    RecordedChange::Lines(lines) => lines
                        .iter()
                        .filter_map(|l| {
                            parse_change_line_reading(l, [&sides[0], &sides[1]], &mut files)
                                .transpose()
                        })
                        .collect::<Result<Vec<_>>>(),
                    RecordedChange::Rules(text, _) if copied => {
                        parse_rules(&text, sides_as, &mut files)
                            .map_err(|e| anyhow::anyhow!("rules: {e}"))
                            .map(|set| {
                                vec![Change::Rules {
                                    set: Box::new(set),
                                    text: text.as_str().into(),
                                    files: Vec::new(),
                                }]
                            })
                    }
                    RecordedChange::Rules(text, _) => {
                        rules_change(&text, dir, sides_as).map(|c| vec![c])
                    }
                };
                changes
                    .map(|changes| Input::Changes { at_ns, changes })
                    .with_context(|| format!("{}: the change at {at_ns} ns", dir.display()))
            }
        })
    }
}

/// A whole rule set that replaced the running one (a reload), as a change;
/// files it names are read relative to the recording directory.
fn rules_change(text: &str, dir: &Path, sides: [&str; 2]) -> Result<Change> {
    let set = load_rules_reading(
        text,
        None,
        Some(dir),
        sides,
        &mut HashMap::new(),
        &mut Vec::new(),
    )?;
    Ok(Change::Rules {
        set: Box::new(set),
        text: text.into(),
        files: Vec::new(),
    })
}

/// A file the start configuration of a version-2 recording named: its copy's
/// text. A name not in the map is not one the run read.
fn start_file(files: &recording::NamedFiles, name: &str) -> Result<String, String> {
    files.get(name).cloned().ok_or_else(|| {
        format!(
            "'{name}': not among the files the recording copied ({} 'files'); the run did \
             not read it",
            recording::META_FILE
        )
    })
}

/// One control line of a recording (as the user typed it to `linkem ctl`) as
/// the change it made, read by the control socket's own parser
/// ([`linkem_ctl::parse_line`], with the tables it may read). A `link` line
/// changes the plain link; `begin`, `commit` (a batch's lines are applied at
/// one instant anyway) and `zero` (counters only) change no decision: None.
/// Pipe, queue, scheduler and rule lines become the node's typed changes
/// ([`linkem_ctl::RuleRequest::change`]); `sides` are the interface names a
/// rule's `recv`/`xmit` may use.
pub fn parse_change_line(line: &str, sides: [&str; 2]) -> Result<Option<Change>> {
    parse_change_line_reading(line, sides, &mut linkem_ctl::system_tables)
}

/// [`parse_change_line`], the files the line names read by `files`.
fn parse_change_line_reading(
    line: &str,
    sides: [&str; 2],
    files: &mut linkem_core::config::FileLoader<'_>,
) -> Result<Option<Change>> {
    use linkem_ctl::{Dir, Request};
    let parsed = linkem_ctl::parse_line_for(line, files, sides)
        .map_err(|e| anyhow::anyhow!("'{line}': {e}"))?;
    match parsed.request {
        Request::Link { dir, link, .. } => Ok(Some(Change::Link {
            sides: match dir {
                Dir::AToB => [true, false],
                Dir::BToA => [false, true],
                Dir::Both => [true, true],
            },
            config: link,
        })),
        Request::Begin | Request::Commit | Request::Zero => Ok(None),
        Request::Rule(rr) => match rr.change() {
            Some(c) => Ok(Some(c)),
            None => bail!("'{line}': not a change a recording keeps (an unnumbered add or a show)"),
        },
        _ => bail!("'{line}': not a change"),
    }
}

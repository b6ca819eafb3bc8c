//! `linkem bridge IF_A IF_B [LINK WORDS...]` and `linkem bridge IF_A IF_B
//! --rules FILE`: live emulation between two interfaces, one command for both
//! models. The live stage (`linkem_runtime::pipeline::LiveBridge`) owns the
//! model: the plain link ([`LinkModel`], from the link words) or a node of
//! ipfw rules and Dummynet pipes ([`Node`], from `--rules` or the config's
//! `rules` key).
//!
//! linkem is a transparent layer-2 bridge: every frame (ARP, IPv4, IPv6,
//! anything) goes through the model unchanged; the hosts on either side need
//! no configuration.
//!
//! Both models share the start-up (the interface lock, the signals, the
//! control socket, the ports), the serving loop (errors, `--duration`,
//! `--stats-interval`), SIGHUP (re-read on a thread of its own, handed to the
//! stage as one change: a link change for both directions, or the new rule
//! set), `--events` and `--record` (the seed, the start configuration and the
//! options that change decisions come from the front). What differs, the
//! [`Front`]:
//! - link words: `--a-to-b`/`--b-to-a` layers, `--forward-only` (the plain
//!   forwarder, no model), `--buffer` checked against rate × delay, the seed
//!   from the words, one start line per direction, `--stats` without node
//!   listings;
//! - rules: the rule file is parsed before any interface is touched (a bad
//!   file changes nothing), the only link word beside it is `seed N`,
//!   `--forward-only` and `--a-to-b`/`--b-to-a` are refused, the delay lines
//!   are sized for every pipe, `linkem ctl` changes pipes and rules (see
//!   `crate::control::rules`), a SIGHUP afterwards re-reads the file,
//!   replacing what `linkem ctl` changed, and gives its objects to the uid
//!   that started linkem; `--stats` adds the node's drops and listings.

pub mod pairs;

use crate::args::{timing, BridgeArgs, OnOff, Realtime, Timing, REALTIME_PRIORITY};
use crate::backend::{
    check_capabilities, claim_interfaces, drop_capabilities, open_interface, resolve_auto,
    BackendKind, Claimed,
};
use crate::control::rules::{normalized, Rules, Source};
use crate::control::{FrontEnd, Model, Plain};
use crate::files::{config_has_rules, config_words, load_distribution};
use crate::files::{load_rules_recording, rules_source_or};
use crate::live_events::EventsWriter;
use crate::live_record::{BridgeTap, RecordSink, LINK_TYPE_ETHERNET, SNAPLEN};
use crate::process::{fresh_seed, signal_flags};
use crate::render::bridge_stats::{print_rules_stats, print_stats};
use anyhow::{bail, Context, Result};
use linkem_core::model::LinkModel;
use linkem_core::node::{Node, NodeConfig};
use linkem_core::rules::RuleSet;
use linkem_core::{Dialect, LinkConfig, LinkSpec, TomlWords};
use linkem_io::creds::starter_uid;
use linkem_io::outfile::{check_distinct, FileUse, OutputFile};
use linkem_io::recording::{NamedFiles, RecordingMeta, Start};
use linkem_runtime::pipeline::{
    buffer_bytes_for, Direction, DirectionOptions, DirectionStats, LiveBridge, LiveOptions, Tap,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a command that embeds the bridge (`linkem shell`) adds to its run.
#[derive(Default)]
pub struct Hooks {
    /// Ends the run as SIGTERM does once set (the shell's command ended).
    pub done: Option<Arc<AtomicBool>>,
    /// Told once the stages run, so that traffic may start.
    pub started: Option<std::sync::mpsc::Sender<()>>,
    /// The command line the link logs name.
    pub command_line: Option<String>,
    /// The command that runs the bridge, for its stats, banner and metrics
    /// (`linkem host` is known from its attachment).
    pub front: FrontEnd,
}

/// [`run`] with `hooks`.
pub fn run_with(args: &BridgeArgs, hooks: Hooks) -> Result<()> {
    run_attached(args, Attach::Interfaces, hooks)
}

/// Where the two sides' packets come from: two interfaces (`linkem bridge`,
/// `linkem shell`), or this host's own stack (`linkem host`, `crate::host`:
/// side a what it receives, side b what it sends). Everything else is one
/// code path.
pub enum Attach<'a> {
    /// IF_A and IF_B of the arguments.
    Interfaces,
    /// Netfilter queues fed by linkem's chains.
    Host(&'a crate::host_ports::HostSetup),
}

/// Runs the emulator on the packets `attach` gives, with either model.
pub fn run_attached(args: &BridgeArgs, attach: Attach<'_>, hooks: Hooks) -> Result<()> {
    // Port claims are pipes and rules of a rule set: `--claims` alone starts a
    // node with none of its own.
    if args.rules.is_some()
        || args.config.as_deref().is_some_and(config_has_rules)
        || args.control.claims.claims
    {
        let front = RulesFront::load(args)?;
        serve_front(args, front, attach, hooks)
    } else {
        let front = LinkFront::load(args)?;
        serve_front(args, front, attach, hooks)
    }
}

/// What one model's bridge does its own way; the rest is [`serve_front`].
trait Front: Sized {
    /// What a SIGHUP re-read gives.
    type Loaded: Send + 'static;
    /// The seed, and whether the user gave it.
    fn seed(&self) -> (u64, bool);
    /// Files the bridge reads (for `--events` not to overwrite them).
    fn inputs(&self, args: &BridgeArgs) -> Vec<FileUse>;
    /// What the model starts from, as a recording keeps it: the start
    /// configuration and the options that change decisions.
    fn recording_start(
        &self,
        args: &BridgeArgs,
    ) -> (Start, serde_json::Map<String, serde_json::Value>);
    /// The files the start configuration read (tables, traces, schedules,
    /// profiles) by the name its words or rules gave each: what a recording
    /// copies, so that its replay reads these bytes and not what is there then.
    fn read_files(&self) -> NamedFiles;
    /// Whether a link of the start configuration duplicates packets.
    fn duplicates(&self) -> bool;
    /// Starts the stages on the opened ports; returns the control model.
    fn start(
        &mut self,
        args: &BridgeArgs,
        ports: Ports,
        timing: &Timing,
        tap: Option<Box<dyn Tap>>,
        control_name: String,
    ) -> Result<Model>;
    /// Reads the sources again (on a thread of its own).
    fn reload(&self) -> Receiver<Result<Self::Loaded>>;
    /// Applies a SIGHUP re-read.
    fn apply_reload(&self, model: &Model, loaded: Self::Loaded);
    /// `--stats` now (`last`: the final counts, `stats` given; `skipped`:
    /// decisions `--events` skipped, when it is written).
    fn print(
        &self,
        args: &BridgeArgs,
        model: &Model,
        stats: &[DirectionStats],
        last: bool,
        skipped: Option<u64>,
    );
    /// An I/O error that stopped a stage, if any.
    fn error(&self, model: &Model) -> Option<String>;
    /// Stops the stages of `model` and prints the final counts (`events`:
    /// the `--events` writer, for what it skipped); returns the tap given at
    /// start.
    fn finish(
        &self,
        args: &BridgeArgs,
        model: Model,
        events: Option<&EventsWriter<OutputFile>>,
    ) -> Result<Option<Box<dyn Tap>>>;
    /// Whether SIGHUP has something to re-read (else the message why not).
    fn sighup_ignored(&self) -> Option<&'static str> {
        None
    }
    /// What each direction's link log names as its link.
    fn link_words(&self, args: &BridgeArgs) -> [String; 2];
    /// Each direction's link at start, when the model is one link per
    /// direction (what a link log's `#` lines describe).
    fn links(&self) -> [Option<LinkConfig>; 2] {
        [None, None]
    }
}

/// Host mode never coalesces: a netfilter verdict accepts or drops the one
/// packet it lent, so there is no super-frame to hand back in its place.
/// `linkem host` sets `--coalesce off`; anything that asks otherwise is
/// refused by name rather than silently sent frame by frame.
pub(crate) fn refuse_coalescing_in_host_mode(args: &BridgeArgs) -> Result<()> {
    if args.coalesce == OnOff::On {
        bail!(
            "--coalesce on is not available in host mode (the netfilter queue \
             gives each packet back by its own verdict, one wire frame at a time)"
        );
    }
    Ok(())
}

/// Both interfaces opened: receive and send halves, and the backend used.
struct Ports {
    rx: [Box<dyn linkem_runtime::port::RxPort>; 2],
    tx: [Box<dyn linkem_runtime::port::TxPort>; 2],
    used: [String; 2],
}

/// The start-up and serving loop both models share.
fn serve_front<F: Front>(
    args: &BridgeArgs,
    mut front: F,
    attach: Attach<'_>,
    mut hooks: Hooks,
) -> Result<()> {
    let timing = timing(args)?;
    if matches!(attach, Attach::Host(_)) {
        refuse_coalescing_in_host_mode(args)?;
    }
    if matches!(attach, Attach::Host(_)) && front.duplicates() {
        bail!(
            "'duplicate' is not available {}",
            crate::host_ports::NO_COPIES
        );
    }
    if args.if_a == args.if_b {
        bail!(
            "IF_A and IF_B are both '{}': a bridge needs two interfaces",
            args.if_a
        );
    }
    let mut outputs: Vec<FileUse> = Vec::new();
    outputs.extend(args.run.events.iter().map(|p| FileUse::new("--events", p)));
    outputs.extend(args.run.record.iter().map(|p| FileUse::new("--record", p)));
    outputs.extend(
        args.run
            .log_a_to_b
            .iter()
            .map(|p| FileUse::new("--log-a-to-b", p)),
    );
    outputs.extend(
        args.run
            .log_b_to_a
            .iter()
            .map(|p| FileUse::new("--log-b-to-a", p)),
    );
    check_distinct(&front.inputs(args), &outputs)?;
    if let (Some(events), Some(dir)) = (&args.run.events, &args.run.record) {
        check_events_outside(events, dir)?;
    }
    let events = match &args.run.events {
        Some(path) => Some(OutputFile::create(path, 1 << 20)?),
        None => None,
    };
    let logs = open_logs(args, &front, hooks.command_line.take())?;
    if args.run.series && args.run.stats != crate::StatsFormat::Json {
        bail!("--series prints JSON lines: it goes with --stats json");
    }
    let series = match (args.run.stats, args.run.stats_interval) {
        (crate::StatsFormat::Json, Some(every)) if args.run.series => {
            Some(crate::series::Series::new(
                (every.max(0.001) * 1e9) as u64,
                linkem_runtime::clock::now_ns(),
            ))
        }
        _ => None,
    };
    // Created before any interface is touched, as the events file is; removed
    // again if the bridge does not start.
    let mut record = match &args.run.record {
        Some(dir) => {
            let (start, options) = front.recording_start(args);
            let mut meta = RecordingMeta::new(
                front.seed().0,
                LINK_TYPE_ETHERNET,
                SNAPLEN,
                [args.if_a.clone(), args.if_b.clone()],
                start,
            );
            meta.options = options;
            meta.files = front.read_files();
            let sink = RecordSink::create(dir, meta, args.run.record_limit)
                .map_err(|e| anyhow::anyhow!("--record {e}"))?;
            Some(sink)
        }
        None => None,
    };
    let realtime = args.run.realtime != Realtime::Off;
    // Held until the bridge ends: no second linkem on these interfaces (the
    // lock comes before the control socket, so it is the lock that refuses it).
    let claimed = match attach {
        Attach::Interfaces => {
            let backend = check_capabilities(
                resolve_auto(args.backend, args.coalesce == OnOff::On),
                realtime,
            )?;
            Some((backend, claim_interfaces(&args.if_a, &args.if_b)?))
        }
        Attach::Host(_) => {
            crate::host_ports::check_capabilities(realtime)?;
            None
        }
    };
    // SIGHUP: read the sources again and hand the stage the change (queued
    // packets keep their release times; nothing is lost). Installed before
    // the control socket is placed: a SIGINT during the start-up then ends
    // the run through the loop, which removes the socket, instead of killing
    // linkem with the socket left behind.
    let (stop, reload) = signal_flags()?;
    // control: opened while linkem may still create /run/linkem and chown the socket.
    let control = crate::control::server::prepare(&args.control, &args.if_a, &args.if_b)?;
    // Read before the stages start, so that a bad --limits fails the start.
    let claims = args.control.claims.build()?;
    // Host mode: the chains go when this does (before the stages stop, so
    // that no new packet is queued to a stage that no longer reads).
    let (ports, chains) = match (&attach, &claimed) {
        (Attach::Host(setup), _) => {
            let a = setup.attach()?;
            let used = ["nfqueue".to_string(), "nfqueue".to_string()];
            let ports = Ports {
                rx: a.rx,
                tx: a.tx,
                used,
            };
            (ports, Some(a.chains))
        }
        (Attach::Interfaces, claimed) => {
            let (backend, claimed) = claimed.as_ref().context("the interfaces are claimed")?;
            (open_ports(args, *backend, claimed)?, None)
        }
    };
    let (events_tap, writer) = match events {
        Some(file) => {
            let (tap, writer) = crate::live_events::start(file)?;
            (Some(tap), Some(writer))
        }
        None => (None, None),
    };
    let (log_tap, log_writer) = match logs {
        Some(logs) => {
            let (tap, writer) = crate::mmlog::start(logs)?;
            (Some(tap), Some(writer))
        }
        None => (None, None),
    };
    let tap = BridgeTap {
        events: events_tap,
        record: record.as_mut().and_then(RecordSink::tap),
        log: log_tap,
        series: series.clone(),
    };
    let started_model = front
        .start(args, ports, &timing, tap.boxed(), control.name.clone())
        .and_then(|mut m| {
            m.front = match attach {
                Attach::Host(_) => FrontEnd::Host,
                Attach::Interfaces => hooks.front,
            };
            if let Some(c) = claims {
                m.enable_claims(c).map_err(|e| anyhow::anyhow!(e))?;
            }
            Ok(m)
        });
    let model = match started_model {
        Ok(model) => model,
        Err(e) => {
            if let Some(r) = record {
                r.discard();
            }
            return Err(e);
        }
    };
    let (seed, seed_given) = front.seed();
    if !seed_given {
        eprintln!("linkem: seed {seed} (add 'seed {seed}' to repeat the random draws)");
    }
    for line in control.announce() {
        eprintln!("{line}");
    }
    let model = Arc::new(model);
    let server = control.start(model.clone());
    let started = Instant::now();
    if let Some(tx) = hooks.started.take() {
        let _ = tx.send(());
    }
    let mut sinks = Sinks {
        events: writer.as_ref(),
        record: record.as_mut(),
        series: series.as_ref(),
    };
    let done = hooks.done.clone().unwrap_or_default();
    let served = serve(
        args,
        &front,
        &model,
        started,
        [&stop, &done],
        &reload,
        &mut sinks,
    );
    drop(chains);
    // control: stop the control threads (removes the socket), then the stages.
    drop(server);
    let model = Arc::try_unwrap(model)
        .map_err(|_| anyhow::anyhow!("a control thread outlived its server"))?;
    let tap = front.finish(args, model, writer.as_ref())?;
    // Dropping the tap ends the events channel and hands the recorder back.
    drop(tap);
    if let Some(series) = &series {
        print_series(series, true);
    }
    let recorded = record.map(RecordSink::finish);
    if let Some(w) = writer {
        finish_events(w)?;
    }
    if let Some(w) = log_writer {
        finish_logs(w)?;
    }
    recorded.transpose()?;
    served
}

/// Refuses an events file inside the recording's directory: the directory
/// holds the recording only (a recording is made in an empty directory, and
/// replay reads what it finds there).
fn check_events_outside(events: &Path, dir: &Path) -> Result<()> {
    // Compared after following links where the paths exist, else as written.
    let full = |p: &Path| -> PathBuf {
        let p = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let mut existing = p.as_path();
        let mut rest = Vec::new();
        while !existing.exists() {
            match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_os_string());
                    existing = parent;
                }
                _ => return p.clone(),
            }
        }
        let mut out = existing
            .canonicalize()
            .unwrap_or_else(|_| existing.to_path_buf());
        out.extend(rest.iter().rev());
        out
    };
    if full(events).starts_with(full(dir)) {
        bail!(
            "--events {} is inside the --record directory {}: that directory holds the \
             recording only; write the events file elsewhere",
            events.display(),
            dir.display()
        );
    }
    Ok(())
}

/// Where the serving loop reports: the events writer (for what it skipped)
/// and the recording (for when it stops early).
struct Sinks<'a> {
    events: Option<&'a EventsWriter<OutputFile>>,
    record: Option<&'a mut RecordSink>,
    series: Option<&'a crate::series::Series>,
}

/// Opens the link logs asked for (before any interface is touched, as the
/// events file is), with their headers.
fn open_logs<F: Front>(
    args: &BridgeArgs,
    front: &F,
    command_line: Option<String>,
) -> Result<Option<[Option<crate::mmlog::MmLog<OutputFile>>; 2]>> {
    if args.run.log_a_to_b.is_none() && args.run.log_b_to_a.is_none() {
        return Ok(None);
    }
    let init_ms = linkem_runtime::clock::now_ns() / 1_000_000;
    let command_line =
        command_line.unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" "));
    let words = front.link_words(args);
    let links = front.links();
    let open =
        |path: &Option<PathBuf>, i: usize| -> Result<Option<crate::mmlog::MmLog<OutputFile>>> {
            let Some(path) = path else { return Ok(None) };
            let header = crate::mmlog::LogHeader {
                link_name: ["uplink", "downlink"][i].into(),
                link: words[i].clone(),
                file: path.display().to_string(),
                command_line: command_line.clone(),
                init_ms,
                capacity: links[i].as_ref().and_then(crate::mmlog::Capacity::of),
            };
            let mut file = OutputFile::create(path, 1 << 20)?;
            // Written as the run goes: in place at once, so a killed run leaves it.
            file.publish()?;
            let log = crate::mmlog::MmLog::new(file, &header)
                .with_context(|| format!("cannot write the link log {}", path.display()))?;
            Ok(Some(log))
        };
    Ok(Some([
        open(&args.run.log_a_to_b, 0)?,
        open(&args.run.log_b_to_a, 1)?,
    ]))
}

/// Waits for the link logs' writer and commits the files.
fn finish_logs(writer: crate::mmlog::LogWriter<OutputFile>) -> Result<()> {
    let (files, skipped) = writer.finish().context("cannot write the link log")?;
    for file in files.into_iter().flatten() {
        file.commit()?;
    }
    if skipped > 0 {
        eprintln!(
            "linkem: link log: {skipped} decisions have no lines (the writer fell behind; \
             the log is incomplete)"
        );
    }
    Ok(())
}

/// Prints the time series' settled intervals (all of them when `last`).
fn print_series(series: &crate::series::Series, last: bool) {
    let every = series.interval_s();
    for (side, start_s, bin) in series.take(linkem_runtime::clock::now_ns(), last) {
        let line = crate::series::Series::json(["a->b", "b->a"][side], start_s, every, &bin);
        println!("{line}");
    }
}

/// Waits for the events writer; says how many decisions have no line.
fn finish_events(writer: EventsWriter<OutputFile>) -> Result<()> {
    let (file, summary) = writer
        .finish()
        .context("--events: cannot write the events file")?;
    file.commit()?;
    if summary.skipped > 0 {
        eprintln!(
            "linkem: --events: {} decisions of {} have no line (the writer fell behind; \
             the file is incomplete)",
            summary.skipped,
            summary.written + summary.skipped
        );
    }
    Ok(())
}

/// Opens both interfaces (claimed by the caller, who holds their locks for
/// the bridge's life) and gives up the capabilities no longer needed.
fn open_ports(args: &BridgeArgs, backend: BackendKind, claimed: &Claimed) -> Result<Ports> {
    // Each interface gives a receive half (to one direction) and a send half (to the other).
    let (rx_a, tx_a, used_a) = open_interface(backend, &args.if_a, claimed.a.mtu)?;
    let (rx_b, tx_b, used_b) = open_interface(backend, &args.if_b, claimed.b.mtu)?;
    drop_capabilities(args.run.realtime != Realtime::Off)?;
    Ok(Ports {
        rx: [rx_a, rx_b],
        tx: [tx_b, tx_a],
        used: [used_a, used_b],
    })
}

/// The stage's options from the command line, delay lines of `buffer_bytes`.
pub(crate) fn live_options(
    args: &BridgeArgs,
    timing: &Timing,
    buffer_bytes: [usize; 2],
    tap: Option<Box<dyn Tap>>,
) -> LiveOptions {
    let realtime = args.run.realtime != Realtime::Off;
    LiveOptions {
        names: ["a->b".into(), "b->a".into()],
        buffer_bytes,
        spin_ns: timing.spin_ns,
        spin_always: timing.spin_always,
        max_lag_ns: timing.max_lag_ns,
        batch: args.run.batch.max(1),
        linger_ns: timing.linger_ns,
        realtime_priority: realtime.then_some(REALTIME_PRIORITY),
        realtime_input: args.run.realtime == Realtime::All,
        coalesce_window_ns: timing.coalesce_window_ns,
        realtime_timed_only: args.run.realtime == Realtime::Timed,
        tap,
    }
}

/// The bridge's main loop, every 20 ms until SIGINT or SIGTERM (`stop`) or
/// `--duration`: ends with a stage's I/O error, re-reads the sources on
/// SIGHUP (`reload`) and prints the counts every `--stats-interval`.
fn serve<F: Front>(
    args: &BridgeArgs,
    front: &F,
    model: &Model,
    started: Instant,
    stop: [&AtomicBool; 2],
    reload: &AtomicBool,
    sinks: &mut Sinks<'_>,
) -> Result<()> {
    let mut reloading: Option<Receiver<Result<F::Loaded>>> = None;
    let mut next_print = args
        .run
        .stats_interval
        .map(|s| started + Duration::from_secs_f64(s.max(0.1)));
    while !stop.iter().any(|s| s.load(Ordering::Relaxed)) {
        std::thread::sleep(Duration::from_millis(20));
        if let Some(d) = args.run.duration {
            if started.elapsed().as_secs_f64() >= d {
                break;
            }
        }
        if let Some(e) = front.error(model) {
            bail!("{e}");
        }
        if let Some(line) = sinks.record.as_mut().and_then(|r| r.stop_notice()) {
            eprintln!("{line}");
        }
        // A SIGHUP during a re-read stays pending and starts the next one after it.
        if reloading.is_none() && reload.swap(false, Ordering::Relaxed) {
            if let Some(why) = front.sighup_ignored() {
                eprintln!("linkem: SIGHUP ignored: {why}");
                continue;
            }
            reloading = Some(front.reload());
        }
        if let Some(answer) = reloading.as_ref().map(Receiver::try_recv) {
            match answer {
                Err(TryRecvError::Empty) => {}
                Ok(loaded) => {
                    reloading = None;
                    match loaded {
                        Ok(loaded) => front.apply_reload(model, loaded),
                        // A broken file must not stop a running emulation.
                        Err(e) => eprintln!("linkem: SIGHUP: {e:#}"),
                    }
                }
                Err(TryRecvError::Disconnected) => reloading = None,
            }
        }
        if let (Some(at), Some(every)) = (next_print, args.run.stats_interval) {
            if Instant::now() >= at {
                let stats = model.raw_stats();
                front.print(
                    args,
                    model,
                    &stats,
                    false,
                    sinks.events.map(EventsWriter::skipped),
                );
                next_print = Some(at + Duration::from_secs_f64(every.max(0.1)));
            }
        }
        if let Some(series) = sinks.series {
            print_series(series, false);
        }
    }
    Ok(())
}

/// Starts a re-read of `load` on a thread of its own: a slow or failing read
/// never holds up the loop that answers SIGINT/SIGTERM.
fn reread<T: Send + 'static>(
    load: impl FnOnce() -> Result<T> + Send + 'static,
) -> Receiver<Result<T>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // The loop may have ended meanwhile; then nobody needs the answer.
        let _ = tx.send(load());
    });
    rx
}

// ---- The plain link: link words ----

pub(crate) fn split(words: &[String]) -> Vec<String> {
    words
        .iter()
        .flat_map(|w| w.split_whitespace().map(str::to_string))
        .collect()
}

/// One direction's link: the words of both directions, then its own, each layer
/// overriding the one before; each file the words read goes into `read` by the
/// name the words gave it (what a recording copies).
pub(crate) fn parse_direction(
    layers: &[&[String]],
    toml: &TomlWords,
    what: &str,
    read: &mut NamedFiles,
) -> Result<LinkSpec> {
    LinkSpec::parse_layers(layers, Dialect::Linkem, &mut |name: &str| {
        let text = match toml.file(name) {
            Some(text) => text.to_string(),
            None => load_distribution(name)?,
        };
        read.insert(name.to_string(), text.clone());
        Ok(text)
    })
    .map_err(|e| {
        let message = linkem_core::filetext::hide_content(&e.to_string(), "", &toml.content());
        anyhow::anyhow!("link words for {what}: {message}")
    })
}

/// A rule set's files (by name) in name order, as a change carries them.
fn sorted_files(files: &HashMap<String, String>) -> Vec<(String, String)> {
    let sorted: NamedFiles = files.iter().map(|(n, t)| (n.clone(), t.clone())).collect();
    sorted.into_iter().collect()
}

/// What the links are read from, owned so that a SIGHUP re-read runs on a
/// thread of its own.
#[derive(Clone)]
struct SpecSource {
    config: Option<PathBuf>,
    words: Vec<String>,
    a_to_b: Vec<String>,
    b_to_a: Vec<String>,
}

/// The link of each direction, from --config (read afresh each call) and the words.
fn load_specs(args: &SpecSource, read: &mut NamedFiles) -> Result<(LinkSpec, LinkSpec)> {
    let mut toml = TomlWords::default();
    if let Some(path) = &args.config {
        toml = config_words(path)?;
    }
    let common = split(&args.words);
    Ok((
        parse_direction(
            &[&toml.both, &common, &toml.a_to_b, &split(&args.a_to_b)],
            &toml,
            "a-to-b",
            read,
        )?,
        parse_direction(
            &[&toml.both, &common, &toml.b_to_a, &split(&args.b_to_a)],
            &toml,
            "b-to-a",
            read,
        )?,
    ))
}

/// The bridge of link words (or `--forward-only`).
struct LinkFront {
    source: SpecSource,
    specs: [LinkSpec; 2],
    /// The files the start's words read, for a recording.
    read: NamedFiles,
    seed: u64,
    forward_only: bool,
}

impl LinkFront {
    fn load(args: &BridgeArgs) -> Result<LinkFront> {
        let source = SpecSource {
            config: args.config.clone(),
            words: args.words.clone(),
            a_to_b: args.a_to_b.clone(),
            b_to_a: args.b_to_a.clone(),
        };
        let mut read = NamedFiles::new();
        let (spec_ab, spec_ba) = load_specs(&source, &mut read)?;
        let seed = spec_ab.seed.or(spec_ba.seed).unwrap_or_else(fresh_seed);
        // Checked in the order the plain bridge always did: the words, the
        // timing options, then the interfaces and --forward-only.
        timing(args)?;
        check_link_args(args)?;
        Ok(LinkFront {
            source,
            specs: [spec_ab, spec_ba],
            read,
            seed,
            forward_only: args.forward_only,
        })
    }
}

/// Refuses what a bridge of links cannot do: one interface twice, or link
/// words with `--forward-only`.
fn check_link_args(args: &BridgeArgs) -> Result<()> {
    if args.if_a == args.if_b {
        bail!(
            "IF_A and IF_B are both '{}': a bridge needs two interfaces",
            args.if_a
        );
    }
    if args.forward_only
        && (!args.words.is_empty()
            || !args.a_to_b.is_empty()
            || !args.b_to_a.is_empty()
            || args.config.is_some())
    {
        bail!("--forward-only bypasses the model: it takes no link words or --config");
    }
    if args.forward_only && args.run.events.is_some() {
        bail!("--forward-only bypasses the model: it has no decisions for --events");
    }
    if args.forward_only && args.run.record.is_some() {
        bail!("--forward-only bypasses the model: it has no inputs for --record to keep");
    }
    Ok(())
}

/// One direction's delay line: `--buffer` (refused when smaller than what
/// the link holds in flight) or sized for the link.
pub(crate) fn link_buffer(spec: &LinkSpec, name: &str, timing: &Timing) -> Result<usize> {
    match timing.buffer {
        Some(b) => {
            // The delay line must hold at least what the link has in flight.
            let rate = spec.link.rate_bps.unwrap_or(0) as u128;
            let in_flight =
                rate * (spec.link.delay_ns as u128 + spec.link.jitter_ns as u128) / 8_000_000_000;
            if (b as u128) < in_flight {
                bail!(
                    "--buffer {b} bytes is too small for {name}: rate × delay is {in_flight} bytes in flight \
                     (leave --buffer out to size it automatically)"
                );
            }
            Ok(b)
        }
        None => Ok(buffer_bytes_for(&spec.link, None)),
    }
}

impl Front for LinkFront {
    type Loaded = (LinkSpec, LinkSpec);

    fn seed(&self) -> (u64, bool) {
        let given = self.specs.iter().any(|s| s.seed.is_some());
        (self.seed, given)
    }

    fn inputs(&self, args: &BridgeArgs) -> Vec<FileUse> {
        args.config
            .iter()
            .map(|p| FileUse::new("--config", p))
            .collect()
    }

    /// The links' canonical words (which parse back to the same links), one
    /// for both sides when they are the same; no option changes a link's
    /// decisions.
    fn recording_start(
        &self,
        _args: &BridgeArgs,
    ) -> (Start, serde_json::Map<String, serde_json::Value>) {
        let [ab, ba] = self.specs.each_ref().map(|s| s.link.to_string());
        let start = if ab == ba {
            Start::Link(ab)
        } else {
            Start::Links([ab, ba])
        };
        (start, serde_json::Map::new())
    }

    fn read_files(&self) -> NamedFiles {
        self.read.clone()
    }

    fn duplicates(&self) -> bool {
        self.specs.iter().any(|s| s.link.duplicate > 0.0)
    }

    fn start(
        &mut self,
        args: &BridgeArgs,
        ports: Ports,
        timing: &Timing,
        tap: Option<Box<dyn Tap>>,
        control_name: String,
    ) -> Result<Model> {
        let Ports { rx, tx, used } = ports;
        let names = ["a->b", "b->a"];
        let ends = [(&args.if_a, &args.if_b), (&args.if_b, &args.if_a)];
        let plain = if self.forward_only {
            let mut directions = Vec::new();
            for (i, (rx, tx)) in rx.into_iter().zip(tx).enumerate() {
                let (name, (from, to)) = (names[i], ends[i]);
                let spec = &self.specs[i];
                let mut opts = DirectionOptions::new(name, spec.link.clone(), self.seed, i as u64);
                opts.batch = args.run.batch.max(1);
                eprintln!(
                    "linkem: {name} ({from} -> {to}, {}): forward only, no model",
                    used[i]
                );
                let d = Direction::start_forwarder(opts, rx, tx)
                    .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
                directions.push(d);
            }
            Plain::Forward(directions)
        } else {
            let buffer = [
                link_buffer(&self.specs[0], names[0], timing)?,
                link_buffer(&self.specs[1], names[1], timing)?,
            ];
            let opts = live_options(args, timing, buffer, tap);
            let links = [self.specs[0].link.clone(), self.specs[1].link.clone()];
            let bridge = LiveBridge::start(opts, LinkModel::new(links, self.seed), rx, tx)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            for (i, (from, to)) in ends.iter().enumerate() {
                eprintln!(
                    "linkem: {} ({from} -> {to}, {}): {}",
                    names[i], used[i], self.specs[i].link
                );
            }
            Plain::Link(bridge)
        };
        let [ab, ba] = &self.specs;
        Ok(Model::new(
            control_name,
            plain,
            [
                (ab.link.clone(), ab.link.to_string()),
                (ba.link.clone(), ba.link.to_string()),
            ],
            self.seed,
            Instant::now(),
        ))
    }

    fn reload(&self) -> Receiver<Result<Self::Loaded>> {
        let src = self.source.clone();
        reread(move || {
            load_specs(&src, &mut NamedFiles::new())
                .map_err(|e| e.context("keeping the current link"))
        })
    }

    fn apply_reload(&self, model: &Model, (ab, ba): Self::Loaded) {
        eprintln!("linkem: SIGHUP: a->b now {}; b->a now {}", ab.link, ba.link);
        let words = [ab.link.to_string(), ba.link.to_string()];
        if let Err(e) = model.reload(ab.link, ba.link, words) {
            eprintln!("linkem: SIGHUP: {}", e.message());
        }
    }

    fn print(
        &self,
        args: &BridgeArgs,
        model: &Model,
        stats: &[DirectionStats],
        last: bool,
        skipped: Option<u64>,
    ) {
        print_stats(
            args.run.stats,
            model.front,
            stats,
            model.elapsed_s(),
            self.seed,
            last,
            skipped,
        );
    }

    fn error(&self, model: &Model) -> Option<String> {
        model.plain().error()
    }

    fn finish(
        &self,
        args: &BridgeArgs,
        model: Model,
        events: Option<&EventsWriter<OutputFile>>,
    ) -> Result<Option<Box<dyn Tap>>> {
        let elapsed = model.elapsed_s();
        let front = model.front;
        let (stats, tap) = match model.into_plain() {
            Plain::Link(mut bridge) => {
                let stats = bridge.stop();
                (stats, bridge.take_tap())
            }
            plain => (plain.stop(), None),
        };
        let skipped = events.map(EventsWriter::skipped);
        print_stats(
            args.run.stats,
            front,
            &stats,
            elapsed,
            self.seed,
            true,
            skipped,
        );
        Ok(tap)
    }

    fn sighup_ignored(&self) -> Option<&'static str> {
        self.forward_only
            .then_some("--forward-only has no link to change")
    }

    fn link_words(&self, _args: &BridgeArgs) -> [String; 2] {
        self.specs.each_ref().map(|s| s.link.to_string())
    }

    fn links(&self) -> [Option<LinkConfig>; 2] {
        self.specs.each_ref().map(|s| Some(s.link.clone()))
    }
}

// ---- A node of rules: --rules ----

/// Where the rules come from, owned so that a SIGHUP re-read runs on a thread
/// of its own (a slow read never holds up the loop that answers SIGINT).
#[derive(Clone)]
struct RulesSource {
    config: Option<PathBuf>,
    file: Option<PathBuf>,
    words: Vec<String>,
    sides: [String; 2],
    /// Started with `--claims` and no rules: the node runs an empty set
    /// (`flush`) that the claims add to.
    claims_only: bool,
}

impl RulesSource {
    /// The rule set, the seed, the source lines and the files they read.
    fn load_source(&self) -> Result<Loaded> {
        let (text, seed) = rules_source_or(
            self.config.as_deref(),
            self.file.as_deref(),
            &self.words,
            self.claims_only.then_some("flush\n"),
        )?
        .context("no rules: the config has no 'rules' key")?;
        let base = self.file.as_deref().and_then(Path::parent);
        let sides = [self.sides[0].as_str(), self.sides[1].as_str()];
        let mut files = HashMap::new();
        let text_file = self.file.as_deref().or(self.config.as_deref());
        load_rules_recording(&text, text_file, base, sides, &mut files)?;
        // The node runs the file as the control plane has always kept it:
        // each rule's text `add N BODY`, whatever its line said.
        let rendered = normalized(&text).map_err(|e| anyhow::anyhow!("rules: {e}"))?;
        let set = load_rules_recording(&rendered, text_file, base, sides, &mut files)
            .context("the rule file, as the control socket keeps it")?;
        let source = Source::new(&rendered, set.clone(), starter_uid());
        Ok(Loaded {
            set,
            text: rendered,
            seed,
            source,
            files,
        })
    }
}

struct Loaded {
    set: RuleSet,
    /// The rule file as the control plane renders it (what the node runs).
    text: String,
    seed: Option<u64>,
    source: Source,
    files: HashMap<String, String>,
}

/// Delay-line bytes per direction: what every pipe may hold in flight at
/// once (each sized as a plain link, see `buffer_bytes_for`), at least what an
/// unshaped link gets, at most 2 GiB; dynamic instances share their pipe's share.
/// Delay-line room added per direction with `--claims` (without `--buffer`).
const CLAIMS_BUFFER_BYTES: usize = 64 << 20;

fn buffer_for(set: &RuleSet) -> usize {
    let floor = buffer_bytes_for(&linkem_core::LinkConfig::default(), None);
    let sum: usize = set
        .pipes
        .values()
        .map(|p| buffer_bytes_for(&p.link, None))
        .fold(0usize, usize::saturating_add);
    sum.clamp(floor, 2 << 30)
}

fn summary(set: &RuleSet) -> String {
    format!(
        "{} pipe{}, {} rule{}{}",
        set.pipes.len(),
        if set.pipes.len() == 1 { "" } else { "s" },
        set.rules.len(),
        if set.rules.len() == 1 { "" } else { "s" },
        if set.one_pass { "" } else { ", one-pass off" }
    )
}

/// The bridge of `--rules`.
struct RulesFront {
    source: RulesSource,
    /// The rules read at start, until the stage takes them.
    start: Option<Loaded>,
    seed: u64,
    seed_given: bool,
}

impl RulesFront {
    /// Parses the rules before any interface is opened: a bad file changes nothing.
    fn load(args: &BridgeArgs) -> Result<RulesFront> {
        check_rules_args(args)?;
        let source = RulesSource {
            config: args.config.clone(),
            file: args.rules.clone(),
            words: args.words.clone(),
            sides: [args.if_a.clone(), args.if_b.clone()],
            claims_only: args.control.claims.claims
                && args.rules.is_none()
                && !args.config.as_deref().is_some_and(config_has_rules),
        };
        let loaded = source.load_source()?;
        let seed_given = loaded.seed.is_some();
        let seed = loaded.seed.unwrap_or_else(fresh_seed);
        Ok(RulesFront {
            source,
            start: Some(loaded),
            seed,
            seed_given,
        })
    }
}

/// The options a rules bridge refuses, before anything is read.
fn check_rules_args(args: &BridgeArgs) -> Result<()> {
    if args.forward_only {
        bail!("--forward-only bypasses the model: it takes no --rules");
    }
    if !args.a_to_b.is_empty() || !args.b_to_a.is_empty() {
        bail!(
            "--a-to-b/--b-to-a: with --rules, link words go in 'pipe N config' lines \
             (select a direction in the rule: 'in'/'a-to-b' or 'out'/'b-to-a')"
        );
    }
    Ok(())
}

impl Front for RulesFront {
    type Loaded = Loaded;

    fn seed(&self) -> (u64, bool) {
        (self.seed, self.seed_given)
    }

    fn inputs(&self, args: &BridgeArgs) -> Vec<FileUse> {
        let mut inputs: Vec<FileUse> = args
            .config
            .iter()
            .map(|p| FileUse::new("--config", p))
            .collect();
        inputs.extend(args.rules.iter().map(|p| FileUse::new("--rules", p)));
        inputs
    }

    /// The rule text the node starts from (as the control plane renders it,
    /// as a reload's text is), and the node's limits and one-pass.
    fn recording_start(
        &self,
        args: &BridgeArgs,
    ) -> (Start, serde_json::Map<String, serde_json::Value>) {
        let mut options = serde_json::Map::new();
        options.insert("max_flows".into(), (args.run.max_flows as u64).into());
        options.insert(
            "max_flow_memory".into(),
            (args.run.max_flow_memory as u64).into(),
        );
        let (text, one_pass) = match &self.start {
            Some(l) => (l.text.clone(), l.set.one_pass),
            None => (String::new(), true),
        };
        options.insert("one_pass".into(), one_pass.into());
        (Start::Rules(text), options)
    }

    fn read_files(&self) -> NamedFiles {
        self.start
            .as_ref()
            .map(|l| sorted_files(&l.files).into_iter().collect())
            .unwrap_or_default()
    }

    fn duplicates(&self) -> bool {
        self.start
            .as_ref()
            .is_some_and(|l| l.set.pipes.values().any(|p| p.link.duplicate > 0.0))
    }

    fn start(
        &mut self,
        args: &BridgeArgs,
        ports: Ports,
        timing: &Timing,
        tap: Option<Box<dyn Tap>>,
        control_name: String,
    ) -> Result<Model> {
        let Loaded {
            set,
            source: lines,
            files,
            ..
        } = self.start.take().context("the rules were taken already")?;
        // Claims add pipes later: room for what they may hold.
        let claims_room = if args.control.claims.claims {
            CLAIMS_BUFFER_BYTES
        } else {
            0
        };
        let buffer_bytes = timing
            .buffer
            .unwrap_or_else(|| buffer_for(&set).saturating_add(claims_room));
        let what = summary(&set);
        let node = Node::new(set, self.node_config(args));
        let Ports { rx, tx, used } = ports;
        let opts = live_options(args, timing, [buffer_bytes; 2], tap);
        let bridge = LiveBridge::start(opts, node, rx, tx).map_err(|e| anyhow::anyhow!(e))?;
        let file = match (&args.rules, &args.config) {
            (Some(f), _) | (None, Some(f)) => f.display().to_string(),
            (None, None) => String::new(),
        };
        eprintln!(
            "linkem: rules {file}: {what}; a->b {} -> {} ({}), b->a {} -> {} ({})",
            args.if_a, args.if_b, used[0], args.if_b, args.if_a, used[1]
        );
        let rules = Rules::new(
            bridge,
            lines,
            [args.if_a.clone(), args.if_b.clone()],
            files,
            starter_uid(),
        );
        Ok(Model::with_rules(
            control_name,
            rules,
            self.seed,
            Instant::now(),
        ))
    }

    fn reload(&self) -> Receiver<Result<Self::Loaded>> {
        let src = self.source.clone();
        reread(move || {
            src.load_source()
                .map_err(|e| e.context("keeping the current rules"))
        })
    }

    /// The re-read rule set replaces the running one at one instant
    /// (`Node::update`: pipes that stay keep their queued packets).
    fn apply_reload(&self, model: &Model, loaded: Self::Loaded) {
        eprintln!("linkem: SIGHUP: rules re-read: {}", summary(&loaded.set));
        let rules = model.rules().expect("a rules model");
        let Loaded { source, files, .. } = loaded;
        if let Err(e) = rules.reload(source, files) {
            eprintln!("linkem: SIGHUP: keeping the current rules: {e}");
        }
    }

    fn print(
        &self,
        args: &BridgeArgs,
        model: &Model,
        stats: &[DirectionStats],
        last: bool,
        skipped: Option<u64>,
    ) {
        let bridge = &model.rules().expect("a rules model").bridge;
        let started = model.started();
        print_rules_stats(
            args.run.stats,
            model.front,
            bridge,
            stats,
            started,
            self.seed,
            last,
            skipped,
        );
    }

    fn error(&self, model: &Model) -> Option<String> {
        model.rules().and_then(|r| r.bridge.error())
    }

    fn finish(
        &self,
        args: &BridgeArgs,
        model: Model,
        events: Option<&EventsWriter<OutputFile>>,
    ) -> Result<Option<Box<dyn Tap>>> {
        let started = model.started();
        let front = model.front;
        let mut bridge = model
            .into_rules()
            .context("a rules model without rules")?
            .bridge;
        let stats = bridge.stop();
        let tap = bridge.take_tap();
        let skipped = events.map(EventsWriter::skipped);
        print_rules_stats(
            args.run.stats,
            front,
            &bridge,
            &stats,
            started,
            self.seed,
            true,
            skipped,
        );
        Ok(tap)
    }

    fn link_words(&self, args: &BridgeArgs) -> [String; 2] {
        let file = args.rules.as_ref().or(args.config.as_ref());
        let what = format!(
            "rules {}",
            file.map(|f| f.display().to_string()).unwrap_or_default()
        );
        [what.clone(), what]
    }
}

impl RulesFront {
    fn node_config(&self, args: &BridgeArgs) -> NodeConfig {
        NodeConfig {
            seed: self.seed,
            max_flows: args.run.max_flows,
            max_flow_bytes: args.run.max_flow_memory,
            ..NodeConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Loaded> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("lab.rules");
        std::fs::write(&path, text)?;
        RulesSource {
            config: None,
            file: Some(path),
            words: Vec::new(),
            sides: ["a".into(), "b".into()],
            claims_only: false,
        }
        .load_source()
    }

    /// Start and SIGHUP read the file through `load_source`: an empty or
    /// comment-only file (one being written, say) is refused, so SIGHUP
    /// keeps the running rules; `flush` asks for an empty set on purpose.
    #[test]
    fn an_empty_rule_file_is_refused_unless_it_says_flush() {
        for text in ["", "\n\n", "# being written\n", "ipfw -q\n"] {
            let e = load(text).err().expect("refused");
            let msg = format!("{e:#}");
            assert!(
                msg.contains("no rule, pipe or 'flush' line"),
                "{text:?}: {msg}"
            );
            assert!(msg.contains("lab.rules"), "{msg}");
        }
        let loaded = load("# nothing on purpose\nflush\n").unwrap();
        assert!(loaded.set.rules.is_empty() && loaded.set.pipes.is_empty());
        let loaded = load("pipe 1 config delay 1ms\n").unwrap();
        assert_eq!(loaded.set.pipes.len(), 1);
    }

    /// `--claims` with no rule file: a node of no rules of its own, which
    /// SIGHUP reads again the same; link words beside it are still refused.
    #[test]
    fn claims_alone_start_an_empty_node() {
        let source = |words: &[&str]| RulesSource {
            config: None,
            file: None,
            words: words.iter().map(|w| w.to_string()).collect(),
            sides: ["received".into(), "sent".into()],
            claims_only: true,
        };
        let loaded = source(&["seed", "7"]).load_source().unwrap();
        assert!(loaded.set.rules.is_empty() && loaded.set.pipes.is_empty());
        assert_eq!(loaded.seed, Some(7));
        let e = source(&["delay", "10ms"])
            .load_source()
            .err()
            .expect("refused");
        assert!(format!("{e:#}").contains("'delay'"), "{e:#}");
    }
}

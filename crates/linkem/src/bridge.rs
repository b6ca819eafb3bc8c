//! `linkem bridge IF_A IF_B [LINK WORDS...]`: live emulation between two
//! interfaces, one pipeline per direction (see `linkem_runtime::pipeline`).
//!
//! linkem is a transparent layer-2 bridge: every frame (ARP, IPv4, IPv6,
//! anything) goes through the link model unchanged; the hosts on either side
//! need no configuration.

use crate::backend::{
    check_capabilities, claim_interfaces, drop_capabilities, open_interface, BackendKind, Claimed,
};
use crate::replay::{config_words, fresh_seed, load_distribution};
use crate::StatsFormat;
use anyhow::{bail, Context, Result};
use linkem_core::units::{parse_size_bytes, parse_time_ns};
use linkem_core::{Dialect, Fate, LinkSpec, TomlWords};
use linkem_runtime::pipeline::{
    buffer_bytes_for, Direction, DirectionOptions, DirectionStats, DEFAULT_MAX_LAG_NS,
    DEFAULT_SPIN_NS,
};
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which stages run under SCHED_FIFO (see `DirectionOptions::realtime_priority`).
#[derive(Clone, Copy, clap::ValueEnum, PartialEq, Eq, Debug)]
pub enum Realtime {
    /// Neither: ordinary scheduling (lateness then depends on the machine's load).
    Off,
    /// The output stages, which must wake at release times (default).
    Out,
    /// Output and input stages (a dedicated machine: the input stages then
    /// take their cores whenever traffic arrives).
    All,
}

/// SCHED_FIFO priority of the stages: above ordinary tasks, below the kernel's
/// interrupt threads (50), which deliver the packets.
pub const REALTIME_PRIORITY: i32 = 10;

/// `linkem bridge`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct BridgeArgs {
    /// First interface (traffic received here goes a->b).
    pub if_a: String,
    /// Second interface (traffic received here goes b->a).
    pub if_b: String,
    /// Link words for both directions, e.g. `delay 10ms rate 50mbit`.
    pub words: Vec<String>,
    /// Link words for IF_A -> IF_B only.
    #[arg(long = "a-to-b", num_args = 1.., value_name = "WORDS")]
    pub a_to_b: Vec<String>,
    /// Link words for IF_B -> IF_A only.
    #[arg(long = "b-to-a", num_args = 1.., value_name = "WORDS")]
    pub b_to_a: Vec<String>,
    /// TOML file of link words (tables [a-to-b] and [b-to-a] for one direction).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Packet I/O: AF_XDP, AF_PACKET with mmap rings, or AF_XDP falling back to AF_PACKET.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendKind,
    /// Print counts as text (default) or JSON lines.
    #[arg(long, value_enum, default_value = "text")]
    pub stats: StatsFormat,
    /// Also print the counts every SECONDS.
    #[arg(long, value_name = "SECONDS", value_parser = linkem_core::units::parse_seconds)]
    pub stats_interval: Option<f64>,
    /// The most the output stage spins before a release time (default 200us). It sleeps
    /// until then and spins only as long as its timed sleeps were recently seen to
    /// overshoot (learnt while running). Lower it to save CPU at the cost of precision.
    #[arg(long, value_name = "TIME")]
    pub spin_threshold: Option<String>,
    /// Drop (as 'late') a packet that cannot leave within TIME of its release time
    /// (default 5ms; 'off' never drops, letting a backlog grow under overload).
    #[arg(long, value_name = "TIME")]
    pub max_lag: Option<String>,
    /// Delay-line size per direction (default: from rate × delay), e.g. 2GiB.
    #[arg(long, value_name = "SIZE")]
    pub buffer: Option<String>,
    /// Frames received per batch.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Which stages run under SCHED_FIFO: 'out' (default) lets the output stages
    /// wake at release times, and the input stages take frames in, at once even when
    /// traffic generators load the same cores (a stage busy for 1 ms without a pause
    /// returns to ordinary scheduling until it next waits); 'all' keeps the input
    /// stages real-time even when busy.
    #[arg(long, value_enum, default_value = "out")]
    pub realtime: Realtime,
    /// Stop after SECONDS (default: run until SIGINT or SIGTERM).
    #[arg(long, value_name = "SECONDS", value_parser = linkem_core::units::parse_seconds)]
    pub duration: Option<f64>,
    /// Send frames through ipfw/dnctl rules and Dummynet pipes read from FILE
    /// instead of one link per direction (lines as typed after `ipfw` or
    /// `dnctl`: `pipe 1 config bw 10Mbit/s delay 20`, `add 100 pipe 1 ip from
    /// any to 10.0.0.2 in`; `in`/`a-to-b`/`recv IF_A`: received on IF_A). One
    /// node thread takes frames from both interfaces: a pipe fed from both
    /// directions is one shared medium. `pipe N config` sets the whole pipe, as
    /// Dummynet does. Takes no link words but `seed N`. `linkem ctl` changes
    /// the running pipes and rules (pipe N config|delete, add, delete, flush,
    /// set one-pass; queued packets keep their release times); SIGHUP re-reads
    /// FILE, replacing such changes. See `linkem replay --help` and README.
    #[arg(long = "rules", value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// With --rules: most dynamic pipe and scheduler instances (masks) alive at
    /// once; a packet needing one more is dropped and counted as flow-limit.
    #[arg(long, value_name = "N", default_value_t = linkem_core::pipe::DEFAULT_MAX_FLOWS)]
    pub max_flows: usize,
    /// With --rules: most memory charged for dynamic instances and scheduler
    /// classes (fq_* flows, masked queues), each charged a fixed size when
    /// made (see README, "Limits"); a packet needing more is dropped and
    /// counted as flow-limit. Default 512MiB.
    #[arg(long, value_name = "SIZE", default_value = "512MiB",
          value_parser = crate::replay_rules::parse_flow_memory)]
    pub max_flow_memory: usize,
    /// Bypass the model: forward every frame at once, one thread per direction,
    /// on the same sockets. The baseline benchmarks compare the emulator with;
    /// takes no link words.
    #[arg(long)]
    pub forward_only: bool,
    /// Control socket, audit log, metrics (see `crate::control`).
    #[command(flatten)]
    pub control: crate::control::ControlArgs,
}

fn split(words: &[String]) -> Vec<String> {
    words
        .iter()
        .flat_map(|w| w.split_whitespace().map(str::to_string))
        .collect()
}

/// One direction's link: the words of both directions, then its own, each layer
/// overriding the one before.
fn parse_direction(layers: &[&[String]], what: &str) -> Result<LinkSpec> {
    LinkSpec::parse_layers(layers, Dialect::Linkem, &mut load_distribution)
        .map_err(|e| anyhow::anyhow!("link words for {what}: {e}"))
}

/// What the links are read from, owned so that a SIGHUP re-read runs on a thread of
/// its own: a slow or failing read never holds up the loop that answers SIGINT/SIGTERM.
#[derive(Clone)]
struct SpecSource {
    config: Option<PathBuf>,
    words: Vec<String>,
    a_to_b: Vec<String>,
    b_to_a: Vec<String>,
}

type Reload = std::sync::mpsc::Receiver<Result<(LinkSpec, LinkSpec)>>;

impl SpecSource {
    fn of(args: &BridgeArgs) -> SpecSource {
        SpecSource {
            config: args.config.clone(),
            words: args.words.clone(),
            a_to_b: args.a_to_b.clone(),
            b_to_a: args.b_to_a.clone(),
        }
    }

    /// Reads the links on a new thread; the answer arrives on the returned channel.
    fn reload(&self) -> Reload {
        let (tx, rx) = std::sync::mpsc::channel();
        let src = self.clone();
        std::thread::spawn(move || {
            // The loop may have ended meanwhile; then nobody needs the answer.
            let _ = tx.send(load_specs(&src));
        });
        rx
    }
}

/// The link of each direction, from --config (read afresh each call) and the words.
fn load_specs(args: &SpecSource) -> Result<(LinkSpec, LinkSpec)> {
    let mut toml = TomlWords::default();
    if let Some(path) = &args.config {
        toml = config_words(path)?;
    }
    let common = split(&args.words);
    Ok((
        parse_direction(
            &[&toml.both, &common, &toml.a_to_b, &split(&args.a_to_b)],
            "a-to-b",
        )?,
        parse_direction(
            &[&toml.both, &common, &toml.b_to_a, &split(&args.b_to_a)],
            "b-to-a",
        )?,
    ))
}

/// The options the emulating paths (links or rules) share.
pub(crate) struct Timing {
    pub spin_ns: u64,
    pub max_lag_ns: Option<u64>,
    pub buffer: Option<usize>,
}

pub(crate) fn timing(args: &BridgeArgs) -> Result<Timing> {
    let spin_ns = match &args.spin_threshold {
        Some(t) => parse_time_ns(t).map_err(|e| anyhow::anyhow!("--spin-threshold {e}"))?,
        None => DEFAULT_SPIN_NS,
    };
    let max_lag_ns = match args.max_lag.as_deref() {
        Some("off") => None,
        Some(t) => Some(parse_time_ns(t).map_err(|e| anyhow::anyhow!("--max-lag {e}"))?),
        None => Some(DEFAULT_MAX_LAG_NS),
    };
    let buffer = match &args.buffer {
        Some(s) => Some(parse_size_bytes(s).map_err(|e| anyhow::anyhow!("--buffer {e}"))? as usize),
        None => None,
    };
    Ok(Timing {
        spin_ns,
        max_lag_ns,
        buffer,
    })
}

/// Runs `linkem bridge` until SIGINT or SIGTERM (or `--duration`), then prints
/// the final counts; with rules, `bridge_rules::run` does instead.
pub fn run(args: &BridgeArgs) -> Result<()> {
    if args.rules.is_some()
        || args
            .config
            .as_deref()
            .is_some_and(crate::replay_rules::config_has_rules)
    {
        return crate::bridge_rules::run(args);
    }
    let source = SpecSource::of(args);
    let (spec_ab, spec_ba) = load_specs(&source)?;
    let seed = spec_ab.seed.or(spec_ba.seed).unwrap_or_else(fresh_seed);
    let timing = timing(args)?;
    check_args(args)?;

    let realtime = args.realtime != Realtime::Off;
    let backend = check_capabilities(args.backend, realtime)?;
    // Held until the bridge ends: no second linkem on these interfaces.
    let claimed = claim_interfaces(&args.if_a, &args.if_b)?;
    // SIGHUP: read --config and the words again and apply them to the running
    // link (queued packets keep their release times; nothing is lost).
    // Installed before the control socket is placed: a SIGINT during the
    // start-up then ends the run through `serve`, which removes the socket,
    // instead of killing linkem with the socket left behind.
    let (stop, reload) = signal_flags()?;
    // control: opened while linkem may still create /run/linkem and chown the socket.
    let control = crate::control::server::prepare(&args.control, &args.if_a, &args.if_b)?;
    let directions =
        start_directions(args, backend, &claimed, [&spec_ab, &spec_ba], seed, &timing)?;
    if spec_ab.seed.is_none() && spec_ba.seed.is_none() {
        eprintln!("linkem: seed {seed} (add 'seed {seed}' to repeat the random draws)");
    }

    // control: the directions are shared with the control threads from here on.
    for line in control.announce() {
        eprintln!("{line}");
    }
    let model = Arc::new(crate::control::Model::new(
        control.name.clone(),
        directions,
        [
            (spec_ab.link.clone(), spec_ab.link.to_string()),
            (spec_ba.link.clone(), spec_ba.link.to_string()),
        ],
        args.forward_only,
        seed,
        Instant::now(),
    ));
    let server = control.start(model.clone());

    let started = Instant::now();
    serve(args, &model, &source, seed, started, &stop, &reload)?;
    // control: stop the control threads (removes the socket), then the directions.
    drop(server);
    let directions = Arc::try_unwrap(model)
        .map_err(|_| anyhow::anyhow!("a control thread outlived its server"))?
        .into_directions();
    let stats: Vec<DirectionStats> = directions.into_iter().map(Direction::stop).collect();
    print_stats(
        args.stats,
        &stats,
        started.elapsed().as_secs_f64(),
        seed,
        true,
    );
    Ok(())
}

/// Refuses what a bridge of links cannot do: one interface twice, or link
/// words with `--forward-only`.
fn check_args(args: &BridgeArgs) -> Result<()> {
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
    Ok(())
}

/// Opens both interfaces, drops the capabilities the rest of the run does not
/// need, and starts the two directions, a->b then b->a.
fn start_directions(
    args: &BridgeArgs,
    backend: BackendKind,
    claimed: &Claimed,
    [spec_ab, spec_ba]: [&LinkSpec; 2],
    seed: u64,
    timing: &Timing,
) -> Result<Vec<Direction>> {
    // Each interface gives a receive half (to one direction) and a send half (to the other).
    let (rx_a, tx_a, used_a) = open_interface(backend, &args.if_a, claimed.a.mtu)?;
    let (rx_b, tx_b, used_b) = open_interface(backend, &args.if_b, claimed.b.mtu)?;
    drop_capabilities(args.realtime != Realtime::Off)?;
    let mut directions = Vec::new();
    for (index, (name, spec, from, to, rx, tx, used)) in [
        ("a->b", spec_ab, &args.if_a, &args.if_b, rx_a, tx_b, &used_a),
        ("b->a", spec_ba, &args.if_b, &args.if_a, rx_b, tx_a, &used_b),
    ]
    .into_iter()
    .enumerate()
    {
        let opts = direction_options(args, name, spec, index as u64, seed, timing)?;
        let direction = if args.forward_only {
            eprintln!("linkem: {name} ({from} -> {to}, {used}): forward only, no model");
            Direction::start_forwarder(opts, rx, tx)
        } else {
            eprintln!("linkem: {name} ({from} -> {to}, {used}): {}", spec.link);
            Direction::start(opts, rx, tx)
        };
        directions.push(direction.map_err(|e| anyhow::anyhow!("{name}: {e}"))?);
    }
    Ok(directions)
}

/// One direction's options: its link and seed stream (`index`: 0 for a->b, 1
/// for b->a), and the timing and scheduling options of the command line.
fn direction_options(
    args: &BridgeArgs,
    name: &str,
    spec: &LinkSpec,
    index: u64,
    seed: u64,
    timing: &Timing,
) -> Result<DirectionOptions> {
    let buffer_bytes = match timing.buffer {
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
            b
        }
        None => buffer_bytes_for(&spec.link, None),
    };
    let mut opts = DirectionOptions::new(name, spec.link.clone(), seed, index);
    opts.buffer_bytes = buffer_bytes;
    opts.spin_ns = timing.spin_ns;
    opts.max_lag_ns = timing.max_lag_ns;
    opts.batch = args.batch.max(1);
    opts.realtime_priority = (args.realtime != Realtime::Off).then_some(REALTIME_PRIORITY);
    opts.realtime_input = args.realtime == Realtime::All;
    Ok(opts)
}

/// The bridge's main loop, every 20 ms until SIGINT or SIGTERM (`stop`) or
/// `--duration`: ends with a stage's I/O error, re-reads the links on SIGHUP
/// (`reload`) and prints the counts every `--stats-interval`.
fn serve(
    args: &BridgeArgs,
    model: &crate::control::Model,
    source: &SpecSource,
    seed: u64,
    started: Instant,
    stop: &AtomicBool,
    reload: &AtomicBool,
) -> Result<()> {
    let mut reloading: Option<Reload> = None;
    let mut next_print = args
        .stats_interval
        .map(|s| started + Duration::from_secs_f64(s.max(0.1)));
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
        if let Some(d) = args.duration {
            if started.elapsed().as_secs_f64() >= d {
                break;
            }
        }
        for d in model.directions() {
            if let Some(e) = d.error() {
                bail!("{e}");
            }
        }
        // A SIGHUP during a re-read stays pending and starts the next one after it.
        if reloading.is_none() && reload.swap(false, Ordering::Relaxed) {
            if args.forward_only {
                eprintln!("linkem: SIGHUP ignored: --forward-only has no link to change");
                continue;
            }
            reloading = Some(source.reload());
        }
        if let Some(answer) = reloading.as_ref().map(Reload::try_recv) {
            if !matches!(answer, Err(std::sync::mpsc::TryRecvError::Empty)) {
                reloading = None;
            }
            apply_reload(model, answer);
        }
        if let (Some(at), Some(every)) = (next_print, args.stats_interval) {
            if Instant::now() >= at {
                let stats: Vec<DirectionStats> = model.raw_stats();
                print_stats(
                    args.stats,
                    &stats,
                    started.elapsed().as_secs_f64(),
                    seed,
                    false,
                );
                next_print = Some(at + Duration::from_secs_f64(every.max(0.1)));
            }
        }
    }
    Ok(())
}

/// Acts on the answer of a SIGHUP re-read, if one came: new links for both
/// directions, or the reason the current ones stay.
fn apply_reload(
    model: &crate::control::Model,
    answer: std::result::Result<Result<(LinkSpec, LinkSpec)>, std::sync::mpsc::TryRecvError>,
) {
    match answer {
        Ok(Ok((ab, ba))) => {
            eprintln!("linkem: SIGHUP: a->b now {}; b->a now {}", ab.link, ba.link);
            let words = [ab.link.to_string(), ba.link.to_string()];
            model.reload(ab.link, ba.link, words); // control: one instant, recorded
        }
        // A broken file must not stop a running emulation: keep the old link.
        Ok(Err(e)) => eprintln!("linkem: SIGHUP: keeping the current link: {e:#}"),
        Err(_) => {}
    }
}

pub(crate) fn percentile_ns(s: &DirectionStats, q: f64) -> u64 {
    if s.lateness.is_empty() {
        0
    } else {
        s.lateness.value_at_quantile(q)
    }
}

/// One direction's counts as `--stats json` prints them (the control socket's
/// `stats` and the metrics endpoint report the same values).
pub(crate) fn direction_json(s: &DirectionStats) -> serde_json::Value {
    let fates: serde_json::Map<String, serde_json::Value> = Fate::ALL
        .iter()
        .map(|f| (f.name().to_string(), json!(s.fates.get(*f))))
        .collect();
    json!({
        "direction": s.name,
        "received": s.received,
        "rx_kernel_drops": s.rx_kernel_drops,
        "segmented": s.segmented,
        "fates": fates,
        "in_flight": s.in_flight,
        "duplicated": s.fates.duplicated,
        "copies_sent": s.copies_sent,
        "corrupted": s.fates.corrupted,
        "lateness_ns": {
            "count": s.lateness.len(),
            "p50": percentile_ns(s, 0.5),
            "p99": percentile_ns(s, 0.99),
            "p99.9": percentile_ns(s, 0.999),
            "max": s.lateness.max(),
        },
        "buffer_bytes": s.buffer_bytes,
        "huge_pages": s.huge_pages,
        "rx_wakeups": s.rx_wakeups,
        "tx_wakeups": s.tx_wakeups,
    })
}

pub(crate) fn print_stats(
    format: StatsFormat,
    stats: &[DirectionStats],
    secs: f64,
    seed: u64,
    last: bool,
) {
    match format {
        StatsFormat::None => {}
        StatsFormat::Json => {
            let dirs: Vec<serde_json::Value> = stats.iter().map(direction_json).collect();
            let out = json!({ "elapsed_s": secs, "final": last, "seed": seed, "directions": dirs });
            println!(
                "{}",
                serde_json::to_string(&out).expect("a JSON value always serialises")
            );
        }
        StatsFormat::Text => {
            println!(
                "linkem bridge after {secs:.1} s{}",
                if last { " (final)" } else { "" }
            );
            println!(
                "{:<6}{:>10}{:>9}{:>10}{:>10}{:>11}{:>8}{:>8}{:>13}{:>6}{:>8}{:>9}{:>10}  lateness p50/p99/p99.9/max",
                "dir",
                "received",
                "k-drops",
                "segmented",
                "delivered",
                "queue-full",
                "loss",
                "policed",
                "backpressure",
                "late",
                "too-big",
                "tx-error",
                "in-flight"
            );
            for s in stats {
                println!(
                    "{:<6}{:>10}{:>9}{:>10}{:>10}{:>11}{:>8}{:>8}{:>13}{:>6}{:>8}{:>9}{:>10}  {}/{}/{}/{}",
                    s.name,
                    s.received,
                    s.rx_kernel_drops,
                    s.segmented,
                    s.fates.get(Fate::Delivered),
                    s.fates.get(Fate::QueueFull),
                    s.fates.get(Fate::Loss),
                    s.fates.get(Fate::Policed),
                    s.fates.get(Fate::Backpressure),
                    s.fates.get(Fate::Late),
                    s.fates.get(Fate::TooBig),
                    s.fates.get(Fate::TxError),
                    s.in_flight,
                    fmt_ns(percentile_ns(s, 0.5)),
                    fmt_ns(percentile_ns(s, 0.99)),
                    fmt_ns(percentile_ns(s, 0.999)),
                    fmt_ns(s.lateness.max()),
                );
            }
        }
    }
}

/// Flags set by SIGINT/SIGTERM (stop, with final counts) and by SIGHUP (read
/// the configuration again), for the bridge's main loop to poll.
pub(crate) fn signal_flags() -> Result<(Arc<AtomicBool>, Arc<AtomicBool>)> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .context("cannot install the signal handler")?;
    }
    let reload = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, reload.clone())
        .context("cannot install the signal handler")?;
    Ok((stop, reload))
}

fn fmt_ns(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.2}ms", ns as f64 / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1}us", ns as f64 / 1e3)
    } else {
        format!("{ns}ns")
    }
}

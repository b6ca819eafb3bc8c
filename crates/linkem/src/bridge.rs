//! `linkem bridge IF_A IF_B [LINK WORDS...]`: live emulation between two
//! interfaces, one pipeline per direction (see `linkem_runtime::pipeline`).
//!
//! linkem is a transparent layer-2 bridge: every frame (ARP, IPv4, IPv6,
//! anything) goes through the link model unchanged; the hosts on either side
//! need no configuration.

use crate::args::{timing, BridgeArgs, Realtime, Timing, REALTIME_PRIORITY};
use crate::backend::{
    check_capabilities, claim_interfaces, drop_capabilities, open_interface, BackendKind, Claimed,
};
use crate::files::{config_has_rules, config_words, load_distribution};
use crate::process::{fresh_seed, signal_flags};
use crate::render::bridge_stats::print_stats;
use anyhow::{bail, Result};
use linkem_core::{Dialect, LinkSpec, TomlWords};
use linkem_runtime::pipeline::{buffer_bytes_for, Direction, DirectionOptions, DirectionStats};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Runs `linkem bridge` until SIGINT or SIGTERM (or `--duration`), then prints
/// the final counts; with rules, `bridge_rules::run` does instead.
pub fn run(args: &BridgeArgs) -> Result<()> {
    if args.rules.is_some() || args.config.as_deref().is_some_and(config_has_rules) {
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

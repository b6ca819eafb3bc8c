//! `linkem bridge IF_A IF_B [LINK WORDS...]`: live emulation between two
//! interfaces, one pipeline per direction (see `linkem_runtime::pipeline`).
//!
//! linkem is a transparent layer-2 bridge: every frame (ARP, IPv4, IPv6,
//! anything) goes through the link model unchanged; the hosts on either side
//! need no configuration.

use crate::backend::{open_interface, BackendKind};
use crate::replay::{fresh_seed, load_distribution};
use crate::StatsFormat;
use anyhow::{bail, Context, Result};
use linkem_core::units::{parse_size_bytes, parse_time_ns};
use linkem_core::{Dialect, Fate, LinkSpec, TomlWords};
use linkem_runtime::pipeline::{
    buffer_bytes_for, Direction, DirectionOptions, DirectionStats, DEFAULT_SPIN_NS,
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

pub struct BridgeArgs {
    pub if_a: String,
    pub if_b: String,
    pub words: Vec<String>,
    pub a_to_b: Vec<String>,
    pub b_to_a: Vec<String>,
    pub config: Option<PathBuf>,
    pub backend: BackendKind,
    pub stats: StatsFormat,
    pub stats_interval: Option<f64>,
    pub spin_threshold: Option<String>,
    pub max_lag: Option<String>,
    pub buffer: Option<String>,
    pub batch: usize,
    pub realtime: Realtime,
    /// Stop by itself after this many seconds (tests, scripted runs).
    pub duration: Option<f64>,
    /// The plain-forwarder baseline: no model, no delay line.
    pub forward_only: bool,
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

fn check_root() -> Result<()> {
    // Safety: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("linkem bridge needs root (or CAP_NET_RAW and CAP_NET_ADMIN) to open raw sockets");
    }
    Ok(())
}

fn check_interface(name: &str) -> Result<u32> {
    let dir = PathBuf::from("/sys/class/net").join(name);
    if !dir.exists() {
        bail!("interface '{name}' does not exist (see 'ip link')");
    }
    let flags = std::fs::read_to_string(dir.join("flags")).unwrap_or_default();
    let up = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16)
        .map(|f| f & 1 != 0)
        .unwrap_or(true);
    if !up {
        bail!("interface '{name}' is down (ip link set dev {name} up)");
    }
    let mtu = std::fs::read_to_string(dir.join("mtu"))
        .ok()
        .and_then(|m| m.trim().parse().ok())
        .unwrap_or(1500);
    Ok(mtu)
}

/// The link of each direction, from --config (read afresh each call) and the words.
fn load_specs(args: &BridgeArgs) -> Result<(LinkSpec, LinkSpec)> {
    let mut toml = TomlWords::default();
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        toml = TomlWords::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
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

pub fn run(args: &BridgeArgs) -> Result<()> {
    let (spec_ab, spec_ba) = load_specs(args)?;
    let seed = spec_ab.seed.or(spec_ba.seed).unwrap_or_else(fresh_seed);
    let spin_ns = match &args.spin_threshold {
        Some(t) => parse_time_ns(t).map_err(|e| anyhow::anyhow!("--spin-threshold {e}"))?,
        None => DEFAULT_SPIN_NS,
    };
    let max_lag_ns = match &args.max_lag {
        Some(t) => Some(parse_time_ns(t).map_err(|e| anyhow::anyhow!("--max-lag {e}"))?),
        None => None,
    };
    let buffer = match &args.buffer {
        Some(s) => Some(parse_size_bytes(s).map_err(|e| anyhow::anyhow!("--buffer {e}"))? as usize),
        None => None,
    };
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

    check_root()?;
    let mtu_a = check_interface(&args.if_a)?;
    let mtu_b = check_interface(&args.if_b)?;

    // Each interface gives a receive half (to one direction) and a send half (to the other).
    let (rx_a, tx_a, used_a) = open_interface(args.backend, &args.if_a, mtu_a)?;
    let (rx_b, tx_b, used_b) = open_interface(args.backend, &args.if_b, mtu_b)?;
    let mut directions = Vec::new();
    for (index, (name, spec, from, to, rx, tx, used)) in [
        (
            "a->b", &spec_ab, &args.if_a, &args.if_b, rx_a, tx_b, &used_a,
        ),
        (
            "b->a", &spec_ba, &args.if_b, &args.if_a, rx_b, tx_a, &used_b,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let buffer_bytes = match buffer {
            Some(b) => {
                // The delay line must hold at least what the link has in flight.
                let rate = spec.link.rate_bps.unwrap_or(0) as u128;
                let in_flight = rate * (spec.link.delay_ns as u128 + spec.link.jitter_ns as u128)
                    / 8_000_000_000;
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
        let mut opts = DirectionOptions::new(name, spec.link.clone(), seed, index as u64);
        opts.buffer_bytes = buffer_bytes;
        opts.spin_ns = spin_ns;
        opts.max_lag_ns = max_lag_ns;
        opts.batch = args.batch.max(1);
        opts.realtime_priority = (args.realtime != Realtime::Off).then_some(REALTIME_PRIORITY);
        opts.realtime_input = args.realtime == Realtime::All;
        let direction = if args.forward_only {
            eprintln!("linkem: {name} ({from} -> {to}, {used}): forward only, no model");
            Direction::start_forwarder(opts, rx, tx)
        } else {
            eprintln!("linkem: {name} ({from} -> {to}, {used}): {}", spec.link);
            Direction::start(opts, rx, tx)
        };
        directions.push(direction.map_err(|e| anyhow::anyhow!("{name}: {e}"))?);
    }
    if spec_ab.seed.is_none() && spec_ba.seed.is_none() {
        eprintln!("linkem: seed {seed} (add 'seed {seed}' to repeat the random draws)");
    }

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .context("cannot install the signal handler")?;
    }
    // SIGHUP: read --config and the words again and apply them to the running
    // link (queued packets keep their release times; nothing is lost).
    let reload = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, reload.clone())
        .context("cannot install the signal handler")?;
    let started = Instant::now();
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
        for d in &directions {
            if let Some(e) = d.error() {
                bail!("{e}");
            }
        }
        if reload.swap(false, Ordering::Relaxed) {
            if args.forward_only {
                eprintln!("linkem: SIGHUP ignored: --forward-only has no link to change");
                continue;
            }
            match load_specs(args) {
                Ok((ab, ba)) => {
                    eprintln!("linkem: SIGHUP: a->b now {}; b->a now {}", ab.link, ba.link);
                    directions[0].reconfigure(ab.link);
                    directions[1].reconfigure(ba.link);
                }
                // A broken file must not stop a running emulation: keep the old link.
                Err(e) => eprintln!("linkem: SIGHUP: keeping the current link: {e:#}"),
            }
        }
        if let (Some(at), Some(every)) = (next_print, args.stats_interval) {
            if Instant::now() >= at {
                let stats: Vec<DirectionStats> = directions.iter().map(Direction::stats).collect();
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

const BRIDGE_FATES: [Fate; 6] = [
    Fate::Delivered,
    Fate::QueueFull,
    Fate::Loss,
    Fate::Policed,
    Fate::Backpressure,
    Fate::Late,
];

fn percentile_ns(s: &DirectionStats, q: f64) -> u64 {
    if s.lateness.is_empty() {
        0
    } else {
        s.lateness.value_at_quantile(q)
    }
}

fn print_stats(format: StatsFormat, stats: &[DirectionStats], secs: f64, seed: u64, last: bool) {
    match format {
        StatsFormat::None => {}
        StatsFormat::Json => {
            let dirs: Vec<serde_json::Value> = stats
                .iter()
                .map(|s| {
                    let fates: serde_json::Map<String, serde_json::Value> = BRIDGE_FATES
                        .iter()
                        .map(|f| (f.name().to_string(), json!(s.fates.get(*f))))
                        .collect();
                    json!({
                        "direction": s.name,
                        "received": s.received,
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
                })
                .collect();
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
                "{:<6}{:>10}{:>10}{:>11}{:>8}{:>8}{:>13}{:>6}{:>10}  lateness p50/p99/p99.9/max",
                "dir",
                "received",
                "delivered",
                "queue-full",
                "loss",
                "policed",
                "backpressure",
                "late",
                "in-flight"
            );
            for s in stats {
                println!(
                    "{:<6}{:>10}{:>10}{:>11}{:>8}{:>8}{:>13}{:>6}{:>10}  {}/{}/{}/{}",
                    s.name,
                    s.received,
                    s.fates.get(Fate::Delivered),
                    s.fates.get(Fate::QueueFull),
                    s.fates.get(Fate::Loss),
                    s.fates.get(Fate::Policed),
                    s.fates.get(Fate::Backpressure),
                    s.fates.get(Fate::Late),
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

fn fmt_ns(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.2}ms", ns as f64 / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1}us", ns as f64 / 1e3)
    } else {
        format!("{ns}ns")
    }
}

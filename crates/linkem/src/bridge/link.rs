//! The bridge of link words: each direction's link from `--config`, the
//! words and `--a-to-b`/`--b-to-a` (each layer overriding the one before),
//! `--buffer` checked against rate × delay, the seed from the words, one
//! start line per direction; or `--forward-only`, the plain forwarder.

use super::{live_options, reread, Launch, Plan, Ports, Reloaded};
use crate::cli::args::{timing, BridgeArgs, Timing};
use crate::control::{Model, Running};
use crate::files::{config_words, load_distribution};
use crate::process::fresh_seed;
use anyhow::{bail, Result};
use linkem_core::model::LinkModel;
use linkem_core::{Dialect, LinkSpec, TomlWords};
use linkem_io::outfile::FileUse;
use linkem_io::recording::{NamedFiles, Start};
use linkem_runtime::pipeline::{buffer_bytes_for, Direction, DirectionOptions, LiveBridge};
use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::time::Instant;

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
pub(super) struct LinkFront {
    source: SpecSource,
    specs: [LinkSpec; 2],
    /// The files the start's words read, for a recording.
    read: NamedFiles,
    seed: u64,
    forward_only: bool,
}

impl LinkFront {
    pub(super) fn load(args: &BridgeArgs) -> Result<LinkFront> {
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

    /// What the start-up needs to know before any interface is touched. A
    /// recording starts from the links' canonical words (which parse back to
    /// the same links), one for both sides when they are the same; no option
    /// changes a link's decisions.
    pub(super) fn plan(&self, args: &BridgeArgs) -> Plan {
        let mut plan = link_plan(&self.specs, self.read.clone(), self.seed);
        plan.inputs = args
            .config
            .iter()
            .map(|p| FileUse::new("--config", p))
            .collect();
        plan.sighup_ignored = self
            .forward_only
            .then_some("--forward-only has no link to change");
        plan
    }

    /// Starts the stages on the opened ports; returns the control model.
    pub(super) fn start(&self, launch: Launch<'_>) -> Result<Model> {
        let (args, timing) = (launch.args, launch.timing);
        let Ports { rx, tx, used } = launch.ports;
        let names = ["a->b", "b->a"];
        let ends = [(&args.if_a, &args.if_b), (&args.if_b, &args.if_a)];
        let running = if self.forward_only {
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
            Running::Forward(directions)
        } else {
            let buffer = [
                link_buffer(&self.specs[0], names[0], timing)?,
                link_buffer(&self.specs[1], names[1], timing)?,
            ];
            let opts = live_options(args, timing, buffer, launch.tap);
            let links = [self.specs[0].link.clone(), self.specs[1].link.clone()];
            let bridge = LiveBridge::start(opts, LinkModel::new(links, self.seed), rx, tx)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            for (i, (from, to)) in ends.iter().enumerate() {
                eprintln!(
                    "linkem: {} ({from} -> {to}, {}): {}",
                    names[i], used[i], self.specs[i].link
                );
            }
            Running::Link(bridge)
        };
        Ok(model(
            launch.control_name,
            running,
            &self.specs,
            self.seed,
            Instant::now(),
        ))
    }

    /// Reads the links again, on a thread of its own.
    pub(super) fn reload(&self) -> Receiver<Result<Reloaded>> {
        let src = self.source.clone();
        reread(move || {
            load_specs(&src, &mut NamedFiles::new())
                .map(|(ab, ba)| Reloaded::Links(ab, ba))
                .map_err(|e| e.context("keeping the current link"))
        })
    }
}

/// What the start-up of a pair of links `specs` (a->b, b->a) knows before
/// any interface is touched: a recording starts from the links' canonical
/// words (which parse back to the same links), one for both sides when they
/// are the same; no option changes a link's decisions. `read`: the files
/// the words read, by the names they gave.
pub(super) fn link_plan(specs: &[LinkSpec; 2], read: NamedFiles, seed: u64) -> Plan {
    let [ab, ba] = specs.each_ref().map(|s| s.link.to_string());
    let start = if ab == ba {
        Start::Link(ab.clone())
    } else {
        Start::Links([ab.clone(), ba.clone()])
    };
    Plan {
        seed,
        seed_given: specs.iter().any(|s| s.seed.is_some()),
        inputs: Vec::new(),
        start,
        options: serde_json::Map::new(),
        read,
        duplicates: specs.iter().any(|s| s.link.duplicate > 0.0),
        link_words: [ab, ba],
        links: specs.each_ref().map(|s| Some(s.link.clone())),
        sighup_ignored: None,
    }
}

/// The control model of a pair running `specs` (a->b, b->a).
pub(super) fn model(
    name: String,
    running: Running,
    specs: &[LinkSpec; 2],
    seed: u64,
    started: Instant,
) -> Model {
    let [ab, ba] = specs;
    Model::new(
        name,
        running,
        [
            (ab.link.clone(), ab.link.to_string()),
            (ba.link.clone(), ba.link.to_string()),
        ],
        seed,
        started,
    )
}

/// A SIGHUP re-read: both directions' links change at one instant.
pub(super) fn apply_reload(model: &Model, ab: LinkSpec, ba: LinkSpec) {
    eprintln!("linkem: SIGHUP: a->b now {}; b->a now {}", ab.link, ba.link);
    let words = [ab.link.to_string(), ba.link.to_string()];
    if let Err(e) = model.reload(ab.link, ba.link, words) {
        eprintln!("linkem: SIGHUP: {}", e.message());
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

//! `linkem replay IN OUT`: a capture goes in, the capture as the emulated link
//! or node would deliver it comes out.
//!
//! # One driver for every model
//! The packets go through a [`Model`](linkem_core::Model), the one interface of
//! [`linkem_core::model`]: a [`LinkModel`] for link words (every packet taken
//! as received on side a, so side a's link, seeded from direction 0, decides
//! them all), a [`Node`] for `--rules FILE` or a config's `rules` (every
//! packet on the side `--rules-side` names; the rule file may also come from
//! the TOML config as `rules = """..."""`, and the only link word allowed
//! beside rules is `seed`). The driver is generic over the model and
//! monomorphised, so the plain link pays for no rule machinery: it never
//! parses a header ([`Model::reads_headers`](linkem_core::Model::reads_headers))
//! and has no events to poll.
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
//! Inputs reach the model by the rules every driver keeps, in the code the
//! live stage calls too ([`linkem_core::driver`]): non-decreasing instants, a
//! packet stamped earlier than one read before it given to the model at the
//! latest earlier stamp ([`arrival_order`]; its `--events` line keeps its own
//! stamp), a recording's changes after a poll at their instant.
//!
//! # Output order
//! Delivered frames (a duplicate right after its original) leave in (release
//! time, decision order), kept as a
//! [`ReleaseRuns`](linkem_core::order::ReleaseRuns) keeps them (a FIFO while
//! releases come in order, as through a link that does not reorder, its bytes
//! in one buffer, and a heap for the others: `in_flight`). A frame is
//! written once no later input can release one earlier
//! than it: every later decision comes from an arrival at or after the last
//! instant given to the model, or from a model event at or after
//! [`Model::next_event_ns`](linkem_core::Model::next_event_ns), and is
//! released no earlier than that instant.
//! So frames released by the horizon = min(last instant, next event) are
//! written after each input, and memory holds the frames in flight, not the
//! file. After the last packet the model's remaining events run one at a time
//! (a poll at each next event), as model time reaches them in a live run.
//!
//! # Undecided frames
//! A node may hold a packet (a scheduler's queue, a hop of a multi-hop path):
//! its frame waits by tag in the driver until the decision. Most packets are
//! decided at their arrival, so the frame, read into one buffer reused for
//! every packet, is copied into the driver's store only when its decision did
//! not come with the arrival.
//!
//! # Events
//! `--events` has one line per decision, in decision order, in the one format
//! of every model and front end
//! ([`EVENTS_HEADER`](linkem_core::model::EVENTS_HEADER),
//! [`write_event`](linkem_core::model::write_event)).
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
use crate::process::fresh_seed;
use crate::render::replay_stats::{print_stats, report};
use anyhow::{Context, Result};
use linkem_core::model::LinkModel;
use linkem_core::node::{Node, NodeConfig};
use linkem_core::rules::Side;
use linkem_io::outfile::{self, FileUse};
use linkem_io::recording::{self};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub mod arrival_order;
mod drive;
mod group;
mod in_flight;
mod logs;
mod recorded;

use drive::replay_capture;
use logs::LogStart;
pub use recorded::parse_change_line;
use recorded::run_recording;

/// Runs `linkem replay` as its arguments ask: a recording directory through
/// the model it recorded, else through rules when `--rules` or a config's
/// `rules` is given, else through the link words.
pub fn run(args: &ReplayArgs) -> Result<()> {
    if crate::sinks::group::is_group_recording(&args.input) {
        return group::run_group(args);
    }
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

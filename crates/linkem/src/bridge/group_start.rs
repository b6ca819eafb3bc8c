//! The models of a group of pairs: each pair a plain link of its words, or
//! a node of its Dummynet rules (`PairPlan::rules`, the `rules FILE` word of
//! `--pair`, or `--rules FILE` for every pair). The rules are read before any
//! interface is touched ([`load_fronts`]); the pairs start at one instant
//! ([`start_pairs`]), so every pair's schedules and traces count from the
//! group's start and its recordings keep that instant.
//!
//! Threads: the live stage runs one model type, so the pairs of links are
//! one group (`linkem-stage` and its two output stages) and, when there are
//! any, the pairs of rules another (three threads more).

use super::group_sinks::GroupSinks;
use super::interfaces::Ports;
use super::link::{link_buffer, link_plan, model, parse_direction};
use super::plan::PairPlan;
use super::rules::RulesFront;
use super::{live_options, Plan};
use crate::cli::args::{BridgeArgs, Timing};
use crate::control::{Model, Running};
use anyhow::Result;
use linkem_core::model::LinkModel;
use linkem_core::node::Node;
use linkem_core::TomlWords;
use linkem_io::outfile::FileUse;
use linkem_io::recording::NamedFiles;
use linkem_runtime::pipeline::{GroupPair, LiveBridge, LiveGroup, Tap};
use std::time::Instant;

/// Each pair's rules, read (None: the pair is a link), in pair order.
pub(super) fn load_fronts(
    args: &BridgeArgs,
    plans: &[PairPlan],
) -> Result<Vec<Option<RulesFront>>> {
    let mut fronts = Vec::new();
    for p in plans {
        let Some(file) = &p.rules else {
            fronts.push(None);
            continue;
        };
        let mut one = args.clone();
        one.pairs.clear();
        one.pair.clear();
        one.words.clear();
        one.if_a = p.if_a.clone();
        one.if_b = p.if_b.clone();
        one.rules = Some(file.clone());
        let front = RulesFront::load(&one)
            .map_err(|e| e.context(format!("pair {} ({} {})", p.name, p.if_a, p.if_b)))?;
        fronts.push(Some(front.seed_or(p.seed)));
    }
    Ok(fronts)
}

/// What each pair's sinks start from ([`Plan`]), when the run writes any.
fn pair_plans(
    args: &BridgeArgs,
    plans: &[PairPlan],
    fronts: &[Option<RulesFront>],
) -> Result<Vec<Plan>> {
    let mut out = Vec::new();
    for (p, front) in plans.iter().zip(fronts) {
        let plan = match front {
            Some(f) => {
                let mut one = args.clone();
                one.rules = p.rules.clone();
                let mut plan = f.plan(&one);
                plan.inputs = vec![FileUse::new("rules", p.rules.clone().unwrap_or_default())];
                plan
            }
            None => link_plan(&p.specs, files_read(p)?, p.seed),
        };
        out.push(plan);
    }
    Ok(out)
}

/// The files a pair's links read (traces, schedules, tables), by the names
/// their words give, read again from their canonical words: what a
/// recording copies, whoever planned the pair.
fn files_read(p: &PairPlan) -> Result<NamedFiles> {
    let mut read = NamedFiles::new();
    let given = TomlWords {
        files: p.files.clone().into_iter().collect(),
        ..TomlWords::default()
    };
    for (i, spec) in p.specs.iter().enumerate() {
        let words: Vec<String> = spec
            .link
            .to_string()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let what = format!("{} {}", p.name, ["a->b", "b->a"][i]);
        parse_direction(&[&words], &given, &what, &mut read)?;
    }
    Ok(read)
}

/// The group's sinks (files created, nothing else touched).
pub(super) fn create_sinks(
    args: &BridgeArgs,
    plans: &[PairPlan],
    fronts: &[Option<RulesFront>],
    command_line: Option<String>,
) -> Result<GroupSinks> {
    let writes = args.run.record.is_some()
        || args.run.events.is_some()
        || args.run.logs.any()
        || args.run.series;
    let metas = if writes {
        pair_plans(args, plans, fronts)?
    } else {
        Vec::new()
    };
    let with: Vec<(&PairPlan, Plan)> = plans.iter().zip(metas).collect();
    GroupSinks::create(args, &with, command_line)
}

/// The running pairs: each one's control model (in pair order) and the
/// groups' threads (stop them before the models).
pub(super) struct StartedPairs {
    pub models: Vec<Model>,
    pub groups: Vec<LiveGroup>,
}

/// Starts every pair on its opened ports with its tap, all at one instant;
/// prints a line per pair.
pub(super) fn start_pairs(
    args: &BridgeArgs,
    timing: &Timing,
    plans: &[PairPlan],
    fronts: Vec<Option<RulesFront>>,
    opened: Vec<Ports>,
    taps: Vec<Option<Box<dyn Tap>>>,
) -> Result<StartedPairs> {
    let mut links: Vec<GroupPair<LinkModel>> = Vec::new();
    let mut link_taps = Vec::new();
    let mut nodes: Vec<GroupPair<Node>> = Vec::new();
    let mut node_taps = Vec::new();
    let mut controls = Vec::new();
    let mut lines = Vec::new();
    let mut taps = taps.into_iter();
    for ((p, front), ports) in plans.iter().zip(fronts).zip(opened) {
        let tap = taps.next().flatten();
        let ends = format!(
            "({} {}, {}/{})",
            p.if_a, p.if_b, ports.used[0], ports.used[1]
        );
        let what = match front {
            None => {
                let buffer_bytes = [
                    link_buffer(&p.specs[0], &format!("{} a->b", p.name), timing)?,
                    link_buffer(&p.specs[1], &format!("{} b->a", p.name), timing)?,
                ];
                let model =
                    LinkModel::new([p.specs[0].link.clone(), p.specs[1].link.clone()], p.seed);
                links.push(group_pair(buffer_bytes, model, ports));
                link_taps.push(tap);
                format!("{}; seed {}", p.specs[0].link, p.seed)
            }
            Some(mut f) => {
                let g = f.group_node(args, timing)?;
                let file = p.rules.as_deref().unwrap_or_else(|| "".as_ref());
                let what = format!("rules {}: {}; seed {}", file.display(), g.summary, f.seed());
                nodes.push(group_pair([g.buffer_bytes; 2], g.node, ports));
                node_taps.push(tap);
                controls.push((g.control, f.seed()));
                what
            }
        };
        lines.push(format!("{ends}: {what}"));
    }
    // One instant for every pair, whichever group runs it.
    let started_ns = linkem_runtime::clock::now_ns();
    let started = Instant::now();
    let mut groups = Vec::new();
    let mut link_bridges = Vec::new().into_iter();
    if !links.is_empty() {
        let opts = live_options(args, timing, [0; 2], None);
        let (b, g) = LiveBridge::start_group_with(opts, links, link_taps, started_ns)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        link_bridges = b.into_iter();
        groups.push(g);
    }
    let mut node_bridges = Vec::new().into_iter();
    if !nodes.is_empty() {
        let opts = live_options(args, timing, [0; 2], None);
        let (b, g) = LiveBridge::start_group_with(opts, nodes, node_taps, started_ns)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        node_bridges = b.into_iter();
        groups.push(g);
    }
    let mut controls = controls.into_iter();
    let mut models = Vec::new();
    for (p, line) in plans.iter().zip(lines) {
        eprintln!("linkem: pair {} {line}", p.name);
        let m = if p.rules.is_none() {
            let bridge = link_bridges
                .next()
                .ok_or_else(|| anyhow::anyhow!("a pair of links did not start"))?;
            model(
                p.name.clone(),
                Running::Link(bridge),
                &p.specs,
                p.seed,
                started,
            )
        } else {
            let bridge = node_bridges
                .next()
                .ok_or_else(|| anyhow::anyhow!("a pair of rules did not start"))?;
            let (control, seed) = controls
                .next()
                .ok_or_else(|| anyhow::anyhow!("a node lost its rules"))?;
            let sides = [p.if_a.clone(), p.if_b.clone()];
            Model::new(
                p.name.clone(),
                control.running(bridge, sides),
                Default::default(),
                seed,
                started,
            )
        };
        models.push(m);
    }
    Ok(StartedPairs { models, groups })
}

/// A pair as the live stage takes it.
fn group_pair<M>(buffer_bytes: [usize; 2], model: M, ports: Ports) -> GroupPair<M> {
    GroupPair {
        names: ["a->b".into(), "b->a".into()],
        buffer_bytes,
        model,
        rx: ports.rx,
        tx: ports.tx,
    }
}

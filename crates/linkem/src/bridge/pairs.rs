//! `linkem bridge --pair IF_A IF_B [WORDS] --pair ...`: many links in one
//! process, each pair of interfaces a bridge of its own link words (a lab of
//! 20-100 links, one linkem for all of them). The interfaces are claimed and
//! opened as a one-pair run's ([`super::interfaces`]: here in parallel, and
//! a signal stops the start-up where it is), one live stage runs every pair
//! ([`run_group`]), and the serving loop is the same ([`super::serve`]).
//!
//! Threads, whatever the number of pairs (see
//! `linkem_runtime::pipeline::LiveGroup`): one live stage (`linkem-stage`)
//! takes a batch of every pair in turn and runs each pair's own model; one
//! output stage sends every pair's a->b frames (`linkem-out-a->b`), one every
//! pair's b->a (`linkem-out-b->a`). Idle, they sleep: the live stage in one
//! poll over all the sockets, the output stages parked until a frame is
//! stored. Each pair's control socket (named IF_A-IF_B, as a one-pair
//! bridge's) has its accept thread, blocked in accept(2); with `--name G`
//! (or `--control PATH`) one socket serves every pair instead, a request
//! naming its pair first (`linkem ctl --name G link IF_A-IF_B delay 30ms`,
//! see `crate::control`'s group), and `--metrics` serves every pair from
//! one endpoint, each series labelled `link="NAME"`.
//!
//! Per pair, as a one-pair bridge of the same words: its link (the words for
//! both directions), its delay lines (sized from its link, or `--buffer`), its
//! counts (`--stats` lists them by pair, [`print_pairs_stats`]), its control
//! socket (`linkem ctl --name IF_A-IF_B link ...` changes that pair only),
//! or its name in the group's socket.
//! Seeds: a pair whose words say `seed N` uses N; the others use
//! [`pair_seed`]`(run seed, index)` (the run seed is the first `seed N` the
//! pairs give, else a fresh one), printed at start for each pair: a one-pair
//! run with that seed decides the same for the same arrivals.
//!
//! A pair may run a node of Dummynet rules instead of its link
//! ([`PairPlan::rules`]; `rules FILE` among its words, or `--rules` for every
//! pair without words), and what a run writes covers every pair: `--record`,
//! `--events`, the link logs, `--series` ([`super::group_start`],
//! [`super::group_sinks`]).
//!
//! Not with several pairs (refused, naming the option): `--config`,
//! `--a-to-b`/`--b-to-a` (a pair's words are its link for both directions),
//! `--forward-only` and the claims
//! (claims are rules of one node). SIGHUP has
//! nothing to re-read (the words are the command line's) and is ignored,
//! saying so.

use super::group_start;
use super::interfaces::Interfaces;
use super::link::{parse_direction, split};
pub(crate) use super::plan::PairPlan;
use super::serve::{pair_stats, serve, PairLabel, Run};
use super::Hooks;
use crate::bridge::backend::Rings;
use crate::cli::args::{timing, BridgeArgs};
use crate::control::server::{prepare, Prepared, Server};
use crate::control::web::Topology;
use crate::control::{ControlArgs, Model};
use crate::process::{fresh_seed, signal_flags};
use crate::render::bridge_stats::print_pairs_stats;
use anyhow::{bail, Result};
use linkem_core::rng::pair_seed;
use linkem_core::TomlWords;
use linkem_io::recording::NamedFiles;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// The pairs of `--pair`, their words parsed and seeds settled; refuses an
/// interface named twice and the options a bridge of several pairs does not
/// take. Nothing is touched yet.
pub(crate) fn plan(args: &BridgeArgs) -> Result<Vec<PairPlan>> {
    check_options(args)?;
    let mut seen = HashSet::new();
    let mut plans = Vec::new();
    for (i, p) in args.pairs.iter().enumerate() {
        let (if_a, if_b) = (&p[0], &p[1]);
        for name in [if_a, if_b] {
            if !seen.insert(name.clone()) {
                bail!(
                    "--pair {if_a} {if_b}: interface '{name}' is in more than one pair \
                     (each interface belongs to one pair)"
                );
            }
        }
        let what = format!("pair {} ({if_a} {if_b})", i + 1);
        let (words, rules) = rules_word(&split(&p[2..]), args.rules.as_ref(), &what)?;
        let mut read = NamedFiles::new();
        let no_toml = TomlWords::default();
        let ab = parse_direction(&[&words], &no_toml, &what, &mut read)?;
        let ba = parse_direction(&[&words], &no_toml, &what, &mut read)?;
        plans.push(PairPlan {
            if_a: if_a.clone(),
            if_b: if_b.clone(),
            name: format!("{if_a}-{if_b}"),
            seed: ab.seed.unwrap_or(0),
            specs: [ab, ba],
            rules,
            files: Default::default(),
        });
    }
    let run_seed = plans
        .iter()
        .find_map(|p| p.specs[0].seed)
        .unwrap_or_else(fresh_seed);
    for (i, p) in plans.iter_mut().enumerate() {
        p.seed = p.specs[0]
            .seed
            .unwrap_or_else(|| pair_seed(run_seed, i as u64));
    }
    Ok(plans)
}

/// A pair's words without its `rules FILE`, and the rule file it runs:
/// its own, else `--rules` (every pair's); beside rules, only `seed N`.
fn rules_word(
    words: &[String],
    every: Option<&PathBuf>,
    what: &str,
) -> Result<(Vec<String>, Option<PathBuf>)> {
    let mut rest = Vec::new();
    let mut own = None;
    let mut it = words.iter();
    while let Some(w) = it.next() {
        if w == "rules" {
            let Some(file) = it.next() else {
                bail!("{what}: 'rules' needs a FILE (rules FILE)");
            };
            if own.replace(PathBuf::from(file)).is_some() {
                bail!("{what}: 'rules' is given twice");
            }
        } else {
            rest.push(w.clone());
        }
    }
    let rules = own.or_else(|| every.cloned());
    let only_seed = rest.is_empty() || (rest.len() == 2 && rest[0] == "seed");
    if rules.is_some() && !only_seed {
        bail!(
            "{what}: a pair of rules takes no link words beside 'seed N' (its links are the \
             rule file's 'pipe N config' lines): give the words to a pair without rules"
        );
    }
    Ok((rest, rules))
}

/// Refuses, by name, what a bridge of several pairs does not do.
fn check_options(args: &BridgeArgs) -> Result<()> {
    let refused: [(bool, &str, &str); 4] = [
        (
            args.config.is_some(),
            "--config",
            "give each pair its words after its --pair",
        ),
        (
            !args.a_to_b.is_empty() || !args.b_to_a.is_empty(),
            "--a-to-b/--b-to-a",
            "a pair's words are its link for both directions",
        ),
        (
            args.forward_only,
            "--forward-only",
            "give the pairs no words instead",
        ),
        (
            args.control.claims.claims,
            "--claims",
            "claims are rules of one node",
        ),
    ];
    if let Some((_, option, why)) = refused.iter().find(|(given, _, _)| *given) {
        bail!("{option} is not available with several --pair ({why})");
    }
    Ok(())
}

/// Runs the bridge of several pairs until SIGINT or SIGTERM (or
/// `--duration`), then prints the final counts of every pair.
pub fn run_group(args: &BridgeArgs) -> Result<()> {
    run_plans(args, plan(args)?, Hooks::default())
}

/// Runs the pairs `plans` (from `--pair`, or a front end that plans its own
/// pairs, as a lab) with the options of `args` that concern the whole run,
/// until a signal, `--duration` or `hooks.done`.
pub(crate) fn run_plans(args: &BridgeArgs, plans: Vec<PairPlan>, mut hooks: Hooks) -> Result<()> {
    let timing = timing(args)?;
    // Read and created before any interface is touched: a bad rule file or
    // output path changes nothing.
    let fronts = group_start::load_fronts(args, &plans)?;
    let mut sinks = group_start::create_sinks(args, &plans, &fronts, hooks.command_line.take())?;
    // From here on SIGINT/SIGTERM stop the start-up too (each pair checks),
    // and what was opened is closed on the way out.
    let (stop, reload) = signal_flags()?;
    let interrupted = |done: usize, what: &str| -> Result<()> {
        if stop.load(Ordering::Relaxed) {
            bail!(
                "stopped by a signal while starting: {done} of {} pairs {what}",
                plans.len()
            );
        }
        Ok(())
    };
    let started = (|| {
        let controls = prepare_controls(args, &plans, &interrupted)?;
        // The sockets above are bound where the caller is; the interfaces and
        // every thread started from here live in `hooks.netns`.
        if let Some(ns) = &hooks.netns {
            linkem_io::netns::enter(ns)?;
        }
        // Held until the bridge ends: no second linkem on these interfaces.
        let names = plans.iter().map(|p| [p.if_a.as_str(), p.if_b.as_str()]);
        let claimed = Interfaces::claim(args, names.collect(), Some(&stop))?;
        // Small rings: most links of a lab are idle at any time.
        let opened = claimed.open(Rings::Small, Some(&stop))?;
        let taps = sinks.start_taps()?;
        let pairs = group_start::start_pairs(args, &timing, &plans, fronts, opened, taps)?;
        Ok((claimed, controls, pairs))
    })();
    let (claimed, controls, started_pairs) = match started {
        Ok(s) => s,
        Err(e) => {
            sinks.discard();
            return Err(e);
        }
    };
    let mut groups = started_pairs.groups;
    eprintln!(
        "linkem: {} pairs in one process: threads linkem-stage, linkem-out-a->b, linkem-out-b->a{}",
        plans.len(),
        if groups.len() > 1 {
            " (twice: the pairs of links, the pairs of rules)"
        } else {
            ""
        }
    );
    let started = Instant::now();
    let models: Vec<Arc<Model>> = started_pairs.models.into_iter().map(Arc::new).collect();
    let topology = hooks.topology.take().unwrap_or_else(|| {
        Topology::pairs(
            plans
                .iter()
                .map(|p| (p.name.as_str(), p.if_a.as_str(), p.if_b.as_str())),
        )
    });
    let (servers, group_model) = controls.start(&models, started, topology);
    // Told once the sockets and pages are announced (`lab up --detach`
    // repeats the page's line from the log when the lab is ready).
    if let Some(tx) = hooks.started.take() {
        let _ = tx.send(());
    }
    let labels: Vec<PairLabel<'_>> = plans
        .iter()
        .zip(&models)
        .map(|(p, m)| PairLabel {
            name: &p.name,
            if_a: &p.if_a,
            if_b: &p.if_b,
            seed: m.seed(),
        })
        .collect();
    let run = Run::Group {
        pairs: &labels,
        models: &models,
        series: sinks.series(),
    };
    let done = hooks.done.clone().unwrap_or_default();
    let served = serve(args, run, started, [&stop, &done], &reload);
    // The control threads first (they remove the sockets), then the stages.
    drop(servers);
    // The group's model holds the pairs' models: it goes with its server.
    drop(group_model);
    for g in &mut groups {
        g.stop();
    }
    let mut last = Vec::new();
    let mut taps = Vec::new();
    for model in models {
        let model = Arc::try_unwrap(model)
            .map_err(|_| anyhow::anyhow!("a control thread outlived its server"))?;
        let stopped = model.error();
        let mut running = model.into_running();
        last.push((running.stop(), stopped));
        taps.push(running.take_tap());
    }
    // Dropping the taps ends the writers' channels and hands the recorders back.
    drop(taps);
    let stats = pair_stats(&labels, last);
    print_pairs_stats(
        args.run.stats,
        &stats,
        started.elapsed().as_secs_f64(),
        true,
    );
    drop(claimed);
    sinks.finish()?;
    served
}

/// The control sockets and the metrics endpoint of a run of several pairs,
/// opened before the pairs start.
enum Controls {
    /// One socket per pair, named IF_A-IF_B (or none with `--control
    /// none`), and the one metrics endpoint of `--metrics` and page of
    /// `--web`, if given.
    PerPair(Vec<Prepared>, Option<Prepared>),
    /// `--name G` or `--control PATH`: one socket (and endpoints) for every pair.
    Group(Prepared),
}

/// Opens the sockets (see [`Controls`]); `interrupted` stops at a signal.
fn prepare_controls(
    args: &BridgeArgs,
    plans: &[PairPlan],
    interrupted: &dyn Fn(usize, &str) -> Result<()>,
) -> Result<Controls> {
    let c = &args.control;
    let given_path = c.control.as_deref().is_some_and(|p| p != "none");
    if c.name.is_some() || given_path {
        // A default name (with --control PATH alone): the first and last pairs' ends.
        let (first, last) = match (plans.first(), plans.last()) {
            (Some(f), Some(l)) => (f.if_a.as_str(), l.if_b.as_str()),
            _ => bail!("no pair to serve"),
        };
        return Ok(Controls::Group(prepare(c, first, last)?));
    }
    let per_pair = ControlArgs {
        metrics: None,
        web: None,
        ..c.clone()
    };
    let mut each = Vec::new();
    for p in plans {
        interrupted(each.len(), "given a control socket")?;
        each.push(prepare(&per_pair, &p.if_a, &p.if_b)?);
    }
    let metrics = match (&c.metrics, &c.web) {
        (None, None) => None,
        _ => {
            let only = ControlArgs {
                control: Some("none".into()),
                control_group: None,
                audit: None,
                ..c.clone()
            };
            Some(prepare(&only, "pairs", "metrics")?)
        }
    };
    Ok(Controls::PerPair(each, metrics))
}

impl Controls {
    /// Starts serving the pairs' `models` (the web page, if any, drawing
    /// `topology`); returns the servers and the model of the group, if one
    /// serves them all.
    fn start(
        self,
        models: &[Arc<Model>],
        started: Instant,
        topology: Topology,
    ) -> (Vec<Server>, Option<Arc<Model>>) {
        let announce = |p: &Prepared| p.announce().into_iter().for_each(|l| eprintln!("{l}"));
        match self {
            Controls::PerPair(each, metrics) => {
                let mut servers = Vec::new();
                for (control, model) in each.into_iter().zip(models) {
                    announce(&control);
                    // No page of its own: `--web` serves the group's.
                    servers.push(control.start(model.clone(), Topology::default()));
                }
                let group = metrics.map(|m| {
                    announce(&m);
                    let g = Arc::new(Model::group(m.name.clone(), models.to_vec(), started));
                    servers.push(m.start(g.clone(), topology));
                    g
                });
                (servers, group)
            }
            Controls::Group(p) => {
                announce(&p);
                let g = Arc::new(Model::group(p.name.clone(), models.to_vec(), started));
                (vec![p.start(g.clone(), topology)], Some(g))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        bridge: BridgeArgs,
    }

    fn args(line: &str) -> BridgeArgs {
        use clap::{CommandFactory, FromArgMatches};
        let matches = Cli::command()
            .try_get_matches_from(std::iter::once("bridge").chain(line.split_whitespace()))
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        let mut a = Cli::from_arg_matches(&matches).unwrap().bridge;
        a.group_pairs(&matches);
        a
    }

    #[test]
    fn each_pair_takes_the_words_after_it() {
        let a = args("--pair a1 b1 delay 5ms --pair a2 b2 delay 10ms loss 1% --stats json");
        let plans = plan(&a).unwrap();
        assert_eq!(plans.len(), 2);
        assert_eq!(
            (plans[0].if_a.as_str(), plans[0].if_b.as_str()),
            ("a1", "b1")
        );
        assert_eq!(plans[0].specs[0].link.delay_ns, 5_000_000);
        assert_eq!(plans[1].specs[1].link.delay_ns, 10_000_000);
        assert!(matches!(
            plans[1].specs[0].link.loss,
            linkem_core::LossConfig::Random { p, .. } if (p - 0.01).abs() < 1e-12
        ));
        assert_eq!(plans[1].name, "a2-b2");
        assert_eq!(a.run.stats, crate::StatsFormat::Json);
    }

    #[test]
    fn seeds_come_from_the_run_seed_and_the_pair_unless_a_pair_names_its_own() {
        let plans = plan(&args(
            "--pair a1 b1 delay 1ms seed 7 --pair a2 b2 delay 1ms --pair a3 b3 seed 9",
        ))
        .unwrap();
        assert_eq!(plans[0].seed, 7);
        assert_eq!(plans[1].seed, pair_seed(7, 1));
        assert_eq!(plans[2].seed, 9);
    }

    #[test]
    fn an_interface_in_two_pairs_and_options_of_one_pair_are_refused_by_name() {
        let e = plan(&args("--pair a1 b1 --pair b1 c1")).err().unwrap();
        assert!(
            format!("{e:#}").contains("interface 'b1' is in more than one pair"),
            "{e:#}"
        );
        for (extra, named) in [
            ("--config c.toml", "--config"),
            ("--claims", "--claims"),
            ("--a-to-b delay 1ms", "--a-to-b"),
        ] {
            let a = args(&format!("{extra} --pair a1 b1 --pair a2 b2"));
            let e = plan(&a).err().unwrap();
            let msg = format!("{e:#}");
            assert!(
                msg.contains(named) && msg.contains("several --pair"),
                "{extra}: {msg}"
            );
        }
        let e = plan(&args("--pair a1 b1 dealy 5ms --pair a2 b2"))
            .err()
            .unwrap();
        assert!(format!("{e:#}").contains("pair 1 (a1 b1)"), "{e:#}");
    }

    #[test]
    fn one_name_one_socket_and_metrics_are_taken_with_several_pairs() {
        for extra in ["--name lab", "--metrics 9100", "--control /tmp/x.sock"] {
            let a = args(&format!("{extra} --pair a1 b1 --pair a2 b2"));
            assert!(plan(&a).is_ok(), "{extra}");
        }
    }

    #[test]
    fn a_pair_runs_its_own_rules_or_those_of_rules_for_every_pair_without_words() {
        let plans = plan(&args(
            "--pair a1 b1 delay 5ms --pair a2 b2 rules n.rules seed 4 --pair a3 b3",
        ))
        .unwrap();
        assert_eq!(plans[0].rules, None);
        assert_eq!(plans[1].rules, Some(PathBuf::from("n.rules")));
        assert_eq!(plans[1].seed, 4);
        assert_eq!(plans[2].rules, None);
        let plans = plan(&args(
            "--rules all.rules --pair a1 b1 --pair a2 b2 rules own.rules",
        ))
        .unwrap();
        assert_eq!(plans[0].rules, Some(PathBuf::from("all.rules")));
        assert_eq!(plans[1].rules, Some(PathBuf::from("own.rules")));
        for (line, says) in [
            (
                "--pair a1 b1 rules n.rules delay 5ms --pair a2 b2",
                "takes no link words",
            ),
            (
                "--rules all.rules --pair a1 b1 delay 5ms --pair a2 b2",
                "takes no link words",
            ),
            ("--pair a1 b1 rules --pair a2 b2", "'rules' needs a FILE"),
            ("--pair a1 b1 rules x rules y --pair a2 b2", "given twice"),
        ] {
            let e = plan(&args(line)).expect_err(line);
            let msg = format!("{e:#}");
            assert!(
                msg.contains(says) && msg.contains("pair 1 (a1 b1)"),
                "{line}: {msg}"
            );
        }
    }

    #[test]
    fn outputs_of_one_pair_are_taken_by_a_group() {
        let a = args(
            "--record rec --events e.jsonl --log-a-to-b {link}.up --max-flows 9 \
             --pair a1 b1 --pair a2 b2",
        );
        assert_eq!(plan(&a).unwrap().len(), 2);
    }

    #[test]
    fn one_pair_is_the_positional_bridge_and_mixing_both_is_refused() {
        let a = args("x y delay 1ms --pair a1 b1");
        let e = crate::bridge::run(&a).err().unwrap();
        assert!(format!("{e:#}").contains("not both"), "{e:#}");
        assert!(
            Cli::try_parse_from(["bridge"]).is_err(),
            "IF_A IF_B or --pair"
        );
        let a = args("a1 b1 delay 1ms");
        assert!(a.pairs.is_empty() && a.if_a == "a1" && a.words == ["delay", "1ms"]);
    }
}

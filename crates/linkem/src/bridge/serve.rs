//! The serving loop of a running bridge, one pair or several: every 20 ms
//! until SIGINT or SIGTERM or `--duration` it looks for a stopped link,
//! answers SIGHUP and prints the counts every `--stats-interval`.

use super::outputs::{print_series, Sinks};
use super::{Front, Reloaded};
use crate::cli::args::BridgeArgs;
use crate::control::{FrontEnd, Model, Running};
use crate::render::bridge_stats::{print_pairs_stats, print_rules_stats, print_stats, PairStats};
use anyhow::{bail, Result};
use linkem_runtime::pipeline::DirectionStats;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What runs, as the loop watches it.
pub(super) enum Run<'a> {
    /// One pair: a stopped link ends the run; SIGHUP re-reads its sources.
    One {
        front: &'a Front,
        model: &'a Model,
        seed: u64,
        /// Why SIGHUP has nothing to re-read, if so.
        sighup_ignored: Option<&'static str>,
        sinks: Sinks<'a>,
    },
    /// Several pairs of link words: a pair whose link stops is reported and
    /// the others go on; their words are the command line's.
    Group {
        pairs: &'a [PairLabel<'a>],
        models: &'a [Arc<Model>],
    },
}

/// A pair of a group as the loop and the counts name it.
pub(super) struct PairLabel<'a> {
    /// IF_A-IF_B, as its control socket is named.
    pub name: &'a str,
    pub if_a: &'a str,
    pub if_b: &'a str,
    pub seed: u64,
}

/// Each pair's counts as the stats list them, from its counts and why it
/// stopped, if it did.
pub(super) fn pair_stats<'a>(
    pairs: &[PairLabel<'a>],
    counts: impl IntoIterator<Item = (Vec<DirectionStats>, Option<String>)>,
) -> Vec<PairStats<'a>> {
    pairs
        .iter()
        .zip(counts)
        .map(|(p, (stats, stopped))| PairStats {
            name: p.name,
            if_a: p.if_a,
            if_b: p.if_b,
            seed: p.seed,
            stats,
            stopped,
        })
        .collect()
}

/// Runs until SIGINT or SIGTERM (any of `stop`) or `--duration`. A one-pair
/// run ends with its stage's I/O error; a run of several pairs once every
/// pair has stopped (nothing is left to emulate), each stopped pair
/// reported once on stderr, naming it, and in the counts (`stopped`).
pub(super) fn serve(
    args: &BridgeArgs,
    mut run: Run<'_>,
    started: Instant,
    stop: [&AtomicBool; 2],
    reload: &AtomicBool,
) -> Result<()> {
    let every = args.run.stats_interval.map(|s| s.max(0.1));
    let mut next_print = every.map(|s| started + Duration::from_secs_f64(s));
    let mut reported = vec![false; run.len()];
    let mut reloading: Option<Receiver<Result<Reloaded>>> = None;
    while !stop.iter().any(|s| s.load(Ordering::Relaxed)) {
        std::thread::sleep(Duration::from_millis(20));
        if args
            .run
            .duration
            .is_some_and(|d| started.elapsed().as_secs_f64() >= d)
        {
            break;
        }
        run.check_stopped(&mut reported)?;
        if let Run::One { sinks, .. } = &mut run {
            if let Some(line) = sinks.record.as_mut().and_then(|r| r.stop_notice()) {
                eprintln!("{line}");
            }
        }
        // A SIGHUP during a re-read stays pending and starts the next one after it.
        if reloading.is_none() && reload.swap(false, Ordering::Relaxed) {
            match run.reread() {
                Ok(answer) => reloading = Some(answer),
                Err(why) => eprintln!("linkem: SIGHUP ignored: {why}"),
            }
        }
        if let Some(answer) = reloading.as_ref().map(Receiver::try_recv) {
            match answer {
                Err(TryRecvError::Empty) => {}
                Ok(loaded) => {
                    reloading = None;
                    match (loaded, &run) {
                        (Ok(loaded), Run::One { model, .. }) => loaded.apply(model),
                        (Ok(_), Run::Group { .. }) => {}
                        // A broken file must not stop a running emulation.
                        (Err(e), _) => eprintln!("linkem: SIGHUP: {e:#}"),
                    }
                }
                Err(TryRecvError::Disconnected) => reloading = None,
            }
        }
        if let (Some(at), Some(every)) = (next_print, every) {
            if Instant::now() >= at {
                run.print(args, started);
                next_print = Some(at + Duration::from_secs_f64(every));
            }
        }
        if let Run::One {
            sinks: Sinks {
                series: Some(series),
                ..
            },
            ..
        } = &run
        {
            print_series(series, false);
        }
    }
    Ok(())
}

impl Run<'_> {
    fn len(&self) -> usize {
        match self {
            Run::One { .. } => 1,
            Run::Group { models, .. } => models.len(),
        }
    }

    /// An error once nothing is left to run.
    fn check_stopped(&self, reported: &mut [bool]) -> Result<()> {
        let (pairs, models) = match self {
            Run::One { model, .. } => match model.error() {
                Some(e) => bail!("{e}"),
                None => return Ok(()),
            },
            Run::Group { pairs, models } => (pairs, models),
        };
        for ((p, m), reported) in pairs.iter().zip(models.iter()).zip(reported.iter_mut()) {
            if *reported {
                continue;
            }
            if let Some(e) = m.error() {
                *reported = true;
                let left = models.len() - models.iter().filter(|m| m.error().is_some()).count();
                eprintln!(
                    "linkem: pair {} ({} {}) stopped: {e}; {left} other pair(s) go on",
                    p.name, p.if_a, p.if_b
                );
            }
        }
        if reported.iter().all(|r| *r) {
            bail!("every pair stopped (see above): nothing left to emulate");
        }
        Ok(())
    }

    /// Starts a SIGHUP re-read, or says why there is nothing to re-read.
    fn reread(&self) -> Result<Receiver<Result<Reloaded>>, &'static str> {
        match self {
            Run::One {
                front,
                sighup_ignored,
                ..
            } => match sighup_ignored {
                Some(why) => Err(why),
                None => Ok(front.reload()),
            },
            Run::Group { .. } => Err("the pairs' words are the command line's \
                 (change a running pair with linkem ctl: --name IF_A-IF_B, or --name G link IF_A-IF_B ...)"),
        }
    }

    /// `--stats` now.
    fn print(&self, args: &BridgeArgs, started: Instant) {
        match self {
            Run::One {
                model, seed, sinks, ..
            } => {
                let stats = model.raw_stats();
                let skipped = sinks
                    .events
                    .map(crate::sinks::events::EventsWriter::skipped);
                let running = model.running();
                let started = model.started();
                print_counts(
                    args,
                    model.front,
                    running,
                    &stats,
                    started,
                    *seed,
                    false,
                    skipped,
                );
            }
            Run::Group { pairs, models } => {
                let stats = pair_stats(pairs, models.iter().map(|m| (m.raw_stats(), m.error())));
                print_pairs_stats(
                    args.run.stats,
                    &stats,
                    started.elapsed().as_secs_f64(),
                    false,
                );
            }
        }
    }
}

/// `--stats` of one pair: its directions, and a node's drops and listings
/// when it runs rules (`last`: the final counts; `skipped`: decisions
/// `--events` skipped, when it is written).
// The counts and what names them, as print_rules_stats takes them.
#[allow(clippy::too_many_arguments)]
pub(super) fn print_counts(
    args: &BridgeArgs,
    front: FrontEnd,
    running: &Running,
    stats: &[DirectionStats],
    started: Instant,
    seed: u64,
    last: bool,
    skipped: Option<u64>,
) {
    match running {
        Running::Rules(r) => print_rules_stats(
            args.run.stats,
            front,
            &r.bridge,
            stats,
            started,
            seed,
            last,
            skipped,
        ),
        _ => print_stats(
            args.run.stats,
            front,
            stats,
            started.elapsed().as_secs_f64(),
            seed,
            last,
            skipped,
        ),
    }
}

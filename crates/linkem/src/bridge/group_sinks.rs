//! What a group of pairs writes beside its traffic: `--events` (one file,
//! a JSON line per decision naming its link: `crate::sinks::events`),
//! `--record DIR` (one group recording: an index and a one-pair recording
//! per link, `crate::sinks::group`), the link logs and `--series` (one per
//! link). Each link's record, logs and series are a one-pair run's
//! ([`super::outputs::Outputs`]), created before any interface is touched
//! and committed once the group stops.

use super::outputs::{check_events_outside, finish_events, Outputs};
use super::plan::PairPlan;
use super::Plan;
use crate::cli::args::BridgeArgs;
use crate::sinks::events::{EventsTap, EventsWriter};
use crate::sinks::group::{per_link, GroupIndex};
use crate::sinks::series::Series;
use anyhow::{bail, Context, Result};
use linkem_io::outfile::{check_distinct, FileUse, OutputFile};
use linkem_runtime::pipeline::Tap;
use std::path::{Path, PathBuf};

/// The sinks of a group, from their creation to their commit.
pub(super) struct GroupSinks {
    /// Each pair's own (record, logs, series), in pair order.
    pairs: Vec<Outputs>,
    names: Vec<String>,
    events_file: Option<OutputFile>,
    events: Option<EventsWriter<OutputFile>>,
    /// The group recording's folder, and whether this run made it.
    record_dir: Option<(PathBuf, bool)>,
}

impl GroupSinks {
    /// Checks the paths and creates the files of every pair (`plans` with
    /// each pair's [`Plan`]); nothing is touched when a path is refused.
    pub(super) fn create(
        args: &BridgeArgs,
        plans: &[(&PairPlan, Plan)],
        command_line: Option<String>,
    ) -> Result<GroupSinks> {
        let inputs: Vec<FileUse> = plans
            .iter()
            .flat_map(|(_, plan)| plan.inputs.iter().cloned())
            .collect();
        if let Some(events) = &args.run.events {
            check_distinct(&inputs, &[FileUse::new("--events", events)])?;
            if let Some(dir) = &args.run.record {
                check_events_outside(events, dir)?;
            }
        }
        let index = GroupIndex::new(
            plans
                .iter()
                .map(|(p, _)| (p.name.as_str(), p.if_a.as_str(), p.if_b.as_str())),
        );
        let mut one_args = Vec::new();
        for (p, _) in plans {
            one_args.push(pair_args(args, p)?);
        }
        let events_file = match &args.run.events {
            Some(path) => Some(OutputFile::create(path, 1 << 20)?),
            None => None,
        };
        let record_dir = match &args.run.record {
            Some(dir) => {
                let index = index?;
                let made = make_record_dir(dir)?;
                let written = index.write(dir);
                let out = (dir.clone(), made);
                if let Err(e) = written {
                    remove_record_dir(&out);
                    return Err(e);
                }
                Some(out)
            }
            None => None,
        };
        let mut sinks = GroupSinks {
            pairs: Vec::new(),
            names: plans.iter().map(|(p, _)| p.name.clone()).collect(),
            events_file,
            events: None,
            record_dir,
        };
        for ((p, plan), one) in plans.iter().zip(&one_args) {
            match Outputs::create(one, plan, command_line.clone()) {
                Ok(o) => sinks.pairs.push(o.for_link(&p.name)),
                Err(e) => {
                    sinks.discard();
                    return Err(e.context(format!("pair {}", p.name)));
                }
            }
        }
        Ok(sinks)
    }

    /// Starts the writers; returns each pair's tap, in pair order.
    pub(super) fn start_taps(&mut self) -> Result<Vec<Option<Box<dyn Tap>>>> {
        let mut events: Vec<Option<EventsTap>> = match self.events_file.take() {
            Some(file) => {
                let (taps, writer) = crate::sinks::events::start_group(file, self.names.clone())?;
                self.events = Some(writer);
                taps.into_iter().map(Some).collect()
            }
            None => Vec::new(),
        };
        events.resize_with(self.pairs.len(), || None);
        let mut taps = Vec::new();
        for (o, e) in self.pairs.iter_mut().zip(events) {
            taps.push(o.start_taps_with(e)?);
        }
        Ok(taps)
    }

    /// Each pair's time series, by its name, when written.
    pub(super) fn series(&self) -> Vec<(&str, &Series)> {
        self.names
            .iter()
            .zip(&self.pairs)
            .filter_map(|(n, o)| o.series().map(|s| (n.as_str(), s)))
            .collect()
    }

    /// The group did not start: no recording is left behind.
    pub(super) fn discard(self) {
        for o in self.pairs {
            o.discard();
        }
        if let Some(dir) = &self.record_dir {
            remove_record_dir(dir);
        }
    }

    /// Once every tap is dropped: each pair's files committed, then the
    /// events file; the first error is returned, the other files committed.
    pub(super) fn finish(self) -> Result<()> {
        let mut first = None;
        for (o, name) in self.pairs.into_iter().zip(&self.names) {
            if let Err(e) = o.finish() {
                eprintln!("linkem: pair {name}: {e:#}");
                first.get_or_insert(e);
            }
        }
        if let Some(w) = self.events {
            if let Err(e) = finish_events(w) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// The options of `args` as a one-pair run of pair `p` takes them: its
/// interfaces, its recording's folder, its own link logs, no events file
/// (the group's one is fed by its own tap).
fn pair_args(args: &BridgeArgs, p: &PairPlan) -> Result<BridgeArgs> {
    let mut one = args.clone();
    one.pairs.clear();
    one.pair.clear();
    one.if_a = p.if_a.clone();
    one.if_b = p.if_b.clone();
    one.rules = p.rules.clone();
    one.run.events = None;
    one.run.record = args.run.record.as_ref().map(|d| d.join(&p.name));
    let logs = &mut one.run.logs;
    for (log, option) in [
        (&mut logs.log_a_to_b, "--log-a-to-b"),
        (&mut logs.log_b_to_a, "--log-b-to-a"),
    ] {
        if let Some(path) = log.as_ref() {
            *log = Some(per_link(path, &p.name, option)?);
        }
    }
    Ok(one)
}

/// Makes the group recording's folder: new, or an empty one; says whether
/// it was made.
fn make_record_dir(dir: &Path) -> Result<bool> {
    if dir.is_dir() {
        let mut entries =
            std::fs::read_dir(dir).with_context(|| format!("--record {}", dir.display()))?;
        if entries.next().is_some() {
            bail!(
                "--record {}: the directory holds files already (a recording is made in a new \
                 or empty directory)",
                dir.display()
            );
        }
        return Ok(false);
    }
    if dir.exists() {
        bail!("--record {}: not a directory", dir.display());
    }
    std::fs::create_dir(dir).with_context(|| format!("--record {}", dir.display()))?;
    Ok(true)
}

/// Removes what a group recording that never started left: its index, and
/// its folder when this run made it (empty by then).
fn remove_record_dir((dir, made): &(PathBuf, bool)) {
    let _ = std::fs::remove_file(dir.join(crate::sinks::group::INDEX_FILE));
    if *made {
        let _ = std::fs::remove_dir(dir);
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

    #[test]
    fn each_pair_writes_its_own_log_and_recording_folder() {
        let a =
            Cli::parse_from(["bridge", "x", "y", "--record", "rec", "--events", "e.jsonl"]).bridge;
        let mut a = a;
        a.run.logs.log_a_to_b = Some("logs/{link}.up".into());
        let p = PairPlan {
            if_a: "a1".into(),
            if_b: "b1".into(),
            name: "r1:eth1--r2:eth1".into(),
            ..Default::default()
        };
        let one = pair_args(&a, &p).unwrap();
        assert_eq!((one.if_a.as_str(), one.if_b.as_str()), ("a1", "b1"));
        assert_eq!(
            one.run.events, None,
            "the group's one file is fed by its tap"
        );
        assert_eq!(one.run.record, Some(PathBuf::from("rec/r1:eth1--r2:eth1")));
        assert_eq!(
            one.run.logs.log_a_to_b,
            Some(PathBuf::from("logs/r1:eth1--r2:eth1.up"))
        );
        a.run.logs.log_b_to_a = Some("down.log".into());
        let e = pair_args(&a, &p).expect_err("one file for every link");
        assert!(format!("{e:#}").contains("--log-b-to-a down.log"), "{e:#}");
    }

    #[test]
    fn a_group_recording_goes_into_a_new_or_empty_folder() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("rec");
        assert!(make_record_dir(&new).unwrap(), "made");
        assert!(!make_record_dir(&new).unwrap(), "empty: taken as it is");
        std::fs::write(new.join("x"), "").unwrap();
        let e = make_record_dir(&new).expect_err("holds a file");
        assert!(format!("{e:#}").contains("holds files already"), "{e:#}");
        let e = make_record_dir(&new.join("x")).expect_err("a file");
        assert!(format!("{e:#}").contains("not a directory"), "{e:#}");
    }
}

//! `linkem replay DIR OUT` of a recording directory.

use crate::cli::args::{outputs, ReplayArgs};
use crate::files::{link_spec_reading, load_rules_reading};
use crate::process::SignalGuard;
use crate::render::replay_stats::{print_stats, report, Tally};
use anyhow::{bail, Context, Result};
use linkem_core::model::{Change, LinkModel, Model};
use linkem_core::node::{Node, NodeConfig};
use linkem_core::rules::{parse_rules, Side};
use linkem_core::{Dialect, LinkSpec};
use linkem_io::capture::LinkType;
use linkem_io::outfile::{self, FileUse};
use linkem_io::recording::{self, RecordedChange, RecordedInput, Recording, Start};
use std::collections::HashMap;
use std::path::Path;

use super::drive::{drive, Input};
use super::logs::LogStart;

/// `linkem replay DIR OUT`: the recording of a live run fed again to the model
/// its `recording.json` describes (seed, link words or start rules, options),
/// every frame with its side and stamp and every change at its instant, so
/// the decisions are the run's. An incomplete recording is replayed as far as
/// it goes, with a warning naming what is missing, and one naming where it was
/// cut when its last record is not whole (a run killed, a full disk).
pub(super) fn run_recording(args: &ReplayArgs) -> Result<()> {
    let dir = args.input.as_path();
    if !args.words.is_empty() || args.config.is_some() || args.rules.file.is_some() {
        bail!(
            "{} is a recording: the model comes from its {}; give no link words, --config or --rules",
            dir.display(),
            recording::META_FILE
        );
    }
    let mut rec = Recording::open(dir).map_err(|e| anyhow::anyhow!("{e}"))?;
    let meta = rec.meta.clone();
    if let Some(missing) = incomplete(&meta) {
        eprintln!(
            "linkem: warning: {}: the recording is incomplete ({missing}); replaying what it holds",
            dir.display()
        );
    }
    let inputs: Vec<FileUse> = [
        recording::META_FILE,
        recording::FRAMES_FILE,
        recording::CHANGES_FILE,
        recording::START_RULES_FILE,
    ]
    .iter()
    .map(|f| FileUse::new("recording", dir.join(f)))
    .collect();
    // Version 2 copied every file the run read: the replay reads those copies
    // (checked by the reader), never the paths as they are now.
    let copied = meta.version >= 2;
    let signals = SignalGuard::install().context("cannot install the signal handler")?;
    let (link_type, snaplen) = (LinkType(meta.link_type), meta.snaplen);
    // The rules name the interfaces by the run's names (`recv IF_A`), as `a`/`b` too.
    let sides = [meta.sides[0].as_str(), meta.sides[1].as_str()];
    let run = Run {
        args,
        dir,
        rec: &mut rec,
        inputs,
        copied,
        signals: &signals,
        link_type,
        snaplen,
        sides,
    };
    match &meta.start {
        Start::Link(_) | Start::Links(_) => replay_links(run, &meta)?,
        Start::Rules(text) => replay_rules(run, &meta, text)?,
    }
    for note in rec.cut_short() {
        eprintln!("linkem: warning: {note}");
    }
    Ok(())
}

/// What replaying a recording needs beside its model.
struct Run<'a> {
    args: &'a ReplayArgs,
    dir: &'a Path,
    rec: &'a mut Recording,
    /// The files read so far (an output must be none of them).
    inputs: Vec<FileUse>,
    /// Version 2 or later: the files the run read are copied in the recording.
    copied: bool,
    signals: &'a SignalGuard,
    link_type: LinkType,
    snaplen: u32,
    sides: [&'a str; 2],
}

impl Run<'_> {
    /// Feeds the recording's inputs to `model` ([`drive`]).
    fn drive<M: Model>(self, model: &mut M, logs: LogStart) -> Result<(Tally, f64)> {
        let next = recorded_inputs(self.rec, self.dir, self.sides);
        drive(
            self.args,
            model,
            self.link_type,
            self.snaplen,
            self.signals,
            logs,
            next,
        )
    }
}

/// The replay of a recording of link words (one for both sides, or one each).
fn replay_links(mut run: Run<'_>, meta: &recording::RecordingMeta) -> Result<()> {
    let (copied, dir, args) = (run.copied, run.dir, run.args);
    let words = match &meta.start {
        Start::Links([ab, ba]) => [ab, ba],
        Start::Link(w) | Start::Rules(w) => [w, w],
    };
    let mut tables = Vec::new();
    let mut spec = |w: &String, side: &str| {
        let spec = if copied {
            let words: Vec<String> = w.split_whitespace().map(str::to_string).collect();
            LinkSpec::parse_layers(&[&words], Dialect::Linkem, &mut |name: &str| {
                start_file(&meta.files, name)
            })
            .map_err(|e| anyhow::anyhow!("link words: {e}"))
        } else {
            link_spec_reading(None, std::slice::from_ref(w), &mut tables)
        };
        spec.with_context(|| format!("{}: start link of {side}", dir.display()))
    };
    let (ab, ba) = (spec(words[0], "a->b")?, spec(words[1], "b->a")?);
    known_options(meta, &[])?;
    run.inputs.extend(
        tables
            .into_iter()
            .map(|p| FileUse::new("distribution table named in the link words", p)),
    );
    outfile::check_distinct(&run.inputs, &outputs(args))?;
    let link_text = if ab.link == ba.link {
        ab.link.to_string()
    } else {
        format!("a->b {}; b->a {}", ab.link, ba.link)
    };
    let logs = LogStart::of_links([&ab.link, &ba.link], meta.start_ns);
    let mut model = LinkModel::new([ab.link, ba.link], meta.seed);
    // The live link's start (version 3), the origin of its traces and
    // schedules; an older recording starts them at the first frame.
    if let Some(t0_ns) = meta.start_ns {
        model.start(t0_ns);
    }
    let (tally, secs) = run.drive(&mut model, logs)?;
    print_stats(args, &link_text, meta.seed, &tally, secs);
    Ok(())
}

/// The replay of a recording of a rule set.
fn replay_rules(mut run: Run<'_>, meta: &recording::RecordingMeta, text: &str) -> Result<()> {
    let (copied, dir, args, sides) = (run.copied, run.dir, run.args, run.sides);
    known_options(meta, &["max_flows", "max_flow_memory", "one_pass"])?;
    let mut named = Vec::new();
    let start_rules = dir.join(recording::START_RULES_FILE);
    let mut set = if copied {
        parse_rules(text, sides, &mut |name: &str| start_file(&meta.files, name))
            .map_err(|e| anyhow::anyhow!("{}: rules: {e}", start_rules.display()))?
    } else {
        load_rules_reading(
            text,
            Some(&start_rules),
            Some(dir),
            sides,
            &mut HashMap::new(),
            &mut named,
        )?
    };
    if let Some(one_pass) = option(meta, "one_pass", serde_json::Value::as_bool)? {
        set.one_pass = one_pass;
    }
    run.inputs.extend(
        named
            .into_iter()
            .map(|p| FileUse::new("file named in the rules", p)),
    );
    outfile::check_distinct(&run.inputs, &outputs(args))?;
    let defaults = NodeConfig::default();
    let to_usize = |v: &serde_json::Value| v.as_u64().and_then(|n| usize::try_from(n).ok());
    let cfg = NodeConfig {
        seed: meta.seed,
        max_flows: option(meta, "max_flows", to_usize)?.unwrap_or(defaults.max_flows),
        max_flow_bytes: option(meta, "max_flow_memory", to_usize)?
            .unwrap_or(defaults.max_flow_bytes),
        ..defaults
    };
    let mut node = Node::new(set, cfg);
    if let Some(t0_ns) = meta.start_ns {
        node.start(t0_ns);
    }
    // A node has no one capacity a direction: no `#` lines.
    let logs = LogStart {
        capacity: [None, None],
        start_ns: meta.start_ns,
    };
    let (tally, secs) = run.drive(&mut node, logs)?;
    report(args, &node, meta.seed, &tally, secs);
    Ok(())
}

/// What an incomplete recording misses, in words; None when it is complete.
fn incomplete(meta: &recording::RecordingMeta) -> Option<String> {
    if meta.complete {
        return None;
    }
    let mut missing = Vec::new();
    if let Some(why) = &meta.stopped {
        missing.push(format!("recording stopped: {why}"));
    }
    if meta.skipped > 0 {
        missing.push(format!(
            "{} frames the run fed its core were skipped",
            meta.skipped
        ));
    }
    if missing.is_empty() {
        missing.push(format!(
            "the run did not finish it: {} says complete: false, the frames after the last \
             written are missing",
            recording::META_FILE
        ));
    }
    Some(missing.join("; "))
}

/// Refuses an option the replay does not know: replaying without it would not
/// decide as the run did.
fn known_options(meta: &recording::RecordingMeta, known: &[&str]) -> Result<()> {
    match meta.options.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => bail!(
            "{}: option '{k}' is not one this replay of a {} run knows",
            recording::META_FILE,
            match meta.start {
                Start::Link(_) | Start::Links(_) => "link",
                Start::Rules(_) => "rules",
            }
        ),
        None => Ok(()),
    }
}

/// Option `name` of the recording read by `get`; an error naming it if it is
/// there but not of the kind `get` reads.
fn option<T>(
    meta: &recording::RecordingMeta,
    name: &str,
    get: impl Fn(&serde_json::Value) -> Option<T>,
) -> Result<Option<T>> {
    meta.options
        .get(name)
        .map(|v| {
            get(v).with_context(|| format!("{}: option '{name}' is {v}", recording::META_FILE))
        })
        .transpose()
}

/// The inputs of a recording in order, its changes parsed: control lines by
/// [`parse_change_line_reading`], a whole rule set by [`parse_rules`]. A
/// version-2 recording's changes read the files the run had read by then (the
/// start's, then each reload's over them, as the live control socket reads
/// the files of the running rules) and then the system's tables, as the live
/// run did; a version-1 recording's, what its replay always read.
fn recorded_inputs<'a>(
    rec: &'a mut Recording,
    dir: &'a Path,
    sides_as: [&'a str; 2],
) -> impl FnMut(&mut Vec<u8>) -> Option<Result<Input>> + 'a {
    let sides = rec.meta.sides.clone();
    let copied = rec.meta.version >= 2;
    let mut read = rec.meta.files.clone();
    move |buf: &mut Vec<u8>| {
        let input = match rec.next_input()? {
            Ok(input) => input,
            Err(e) => return Some(Err(anyhow::anyhow!("{e}"))),
        };
        Some(match input {
            RecordedInput::Frame {
                side,
                ts_ns,
                orig_len,
                data,
            } => match side {
                0 | 1 => {
                    *buf = data;
                    Ok(Input::Frame {
                        side: if side == 0 { Side::A } else { Side::B },
                        ts_ns,
                        orig_len,
                    })
                }
                _ => Err(anyhow::anyhow!(
                    "{}: a frame on side {side} (0 or 1)",
                    dir.display()
                )),
            },
            RecordedInput::Change { at_ns, change } => {
                if copied {
                    if let RecordedChange::Rules(_, files) = &change {
                        read.extend(files.iter().map(|(n, t)| (n.clone(), t.clone())));
                    }
                }
                let mut files = |name: &str| match read.get(name) {
                    Some(text) if copied => Ok(text.clone()),
                    _ => linkem_ctl::system_tables(name),
                };
                let changes = match change {
                    RecordedChange::Lines(lines) => lines
                        .iter()
                        .filter_map(|l| {
                            parse_change_line_reading(l, [&sides[0], &sides[1]], &mut files)
                                .transpose()
                        })
                        .collect::<Result<Vec<_>>>(),
                    RecordedChange::Rules(text, _) if copied => {
                        parse_rules(&text, sides_as, &mut files)
                            .map_err(|e| anyhow::anyhow!("rules: {e}"))
                            .map(|set| {
                                vec![Change::Rules {
                                    set: Box::new(set),
                                    text: text.as_str().into(),
                                    files: Vec::new(),
                                }]
                            })
                    }
                    RecordedChange::Rules(text, _) => {
                        rules_change(&text, dir, sides_as).map(|c| vec![c])
                    }
                };
                changes
                    .map(|changes| Input::Changes { at_ns, changes })
                    .with_context(|| format!("{}: the change at {at_ns} ns", dir.display()))
            }
        })
    }
}

/// A whole rule set that replaced the running one (a reload), as a change;
/// files it names are read relative to the recording directory.
fn rules_change(text: &str, dir: &Path, sides: [&str; 2]) -> Result<Change> {
    let set = load_rules_reading(
        text,
        None,
        Some(dir),
        sides,
        &mut HashMap::new(),
        &mut Vec::new(),
    )?;
    Ok(Change::Rules {
        set: Box::new(set),
        text: text.into(),
        files: Vec::new(),
    })
}

/// A file the start configuration of a version-2 recording named: its copy's
/// text. A name not in the map is not one the run read.
fn start_file(files: &recording::NamedFiles, name: &str) -> Result<String, String> {
    files.get(name).cloned().ok_or_else(|| {
        format!(
            "'{name}': not among the files the recording copied ({} 'files'); the run did \
             not read it",
            recording::META_FILE
        )
    })
}

/// One control line of a recording (as the user typed it to `linkem ctl`) as
/// the change it made, read by the control socket's own parser
/// ([`linkem_ctl::parse_line`], with the tables it may read). A `link` line
/// changes the plain link; `begin`, `commit` (a batch's lines are applied at
/// one instant anyway) and `zero` (counters only) change no decision: None.
/// Pipe, queue, scheduler and rule lines become the node's typed changes
/// ([`linkem_ctl::RuleRequest::change`]); `sides` are the interface names a
/// rule's `recv`/`xmit` may use.
pub fn parse_change_line(line: &str, sides: [&str; 2]) -> Result<Option<Change>> {
    parse_change_line_reading(line, sides, &mut linkem_ctl::system_tables)
}

/// [`parse_change_line`], the files the line names read by `files`.
fn parse_change_line_reading(
    line: &str,
    sides: [&str; 2],
    files: &mut linkem_core::config::FileLoader<'_>,
) -> Result<Option<Change>> {
    use linkem_ctl::{Dir, Request};
    let parsed = linkem_ctl::parse_line_for(line, files, sides)
        .map_err(|e| anyhow::anyhow!("'{line}': {e}"))?;
    match parsed.request {
        // A recording holds whole links: `replace` lines, and `link` lines
        // written before `link` became a patch (the words alone, whole).
        Request::Link {
            dir, link, words, ..
        } => {
            let config = match link {
                Some(link) => link,
                None => bail!(
                    "'{line}': the words are not a whole link ({})",
                    words.join(" ")
                ),
            };
            Ok(Some(Change::Link {
                sides: match dir {
                    Dir::AToB => [true, false],
                    Dir::BToA => [false, true],
                    Dir::Both => [true, true],
                },
                config,
            }))
        }
        Request::Begin | Request::Commit | Request::Zero => Ok(None),
        Request::Rule(rr) => match rr.change() {
            Some(c) => Ok(Some(c)),
            None => bail!("'{line}': not a change a recording keeps (an unnumbered add or a show)"),
        },
        _ => bail!("'{line}': not a change"),
    }
}

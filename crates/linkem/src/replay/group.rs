//! `linkem replay DIR OUTDIR` of a group recording (`linkem bridge --pair
//! ... --pair ... --record DIR`, a lab: `crate::sinks::group`): every link's
//! recording replayed as a one-pair recording is ([`super::run_recording`]),
//! its output capture `OUTDIR/NAME.pcap`. `--events FILE` is one file of
//! JSON lines naming each line's link, as the live group's (link after link,
//! each in decision order); the link logs' paths take `{link}` as the live
//! run's do.

use super::run_recording;
use crate::cli::args::ReplayArgs;
use crate::sinks::events::json_event;
use crate::sinks::group::{per_link, GroupIndex};
use anyhow::{bail, Context, Result};
use linkem_io::outfile::OutputFile;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

/// Replays every link of the group recording `args.input` into the folder
/// `args.output`.
pub(super) fn run_group(args: &ReplayArgs) -> Result<()> {
    let dir = args.input.as_path();
    let index = GroupIndex::read(dir)?;
    if !args.words.is_empty() || args.config.is_some() || args.rules.file.is_some() {
        bail!(
            "{} is a group recording: each link's model comes from its recording; give no \
             link words, --config or --rules",
            dir.display()
        );
    }
    let out_dir = args.output.as_path();
    make_out_dir(out_dir)?;
    let mut events = match &args.events {
        Some(path) => Some(OutputFile::create(path, 1 << 20)?),
        None => None,
    };
    for link in &index.links {
        eprintln!("linkem: link {} ({} {}):", link.name, link.if_a, link.if_b);
        let mut one = args.clone();
        one.input = dir.join(&link.dir);
        one.output = out_dir.join(format!("{}.pcap", link.dir));
        // The link's own events, made into the group's lines once written.
        let part = out_dir.join(format!(".{}.events.part", link.dir));
        one.events = events.as_ref().map(|_| part.clone());
        one.logs.log_a_to_b = link_path(&args.logs.log_a_to_b, &link.name, "--log-a-to-b")?;
        one.logs.log_b_to_a = link_path(&args.logs.log_b_to_a, &link.name, "--log-b-to-a")?;
        let replayed = run_recording(&one)
            .with_context(|| format!("link {} ({})", link.name, one.input.display()));
        if let Some(out) = events.as_mut() {
            let copied = replayed.and_then(|()| append_events(out, &part, &link.name));
            let _ = std::fs::remove_file(&part);
            copied?;
        } else {
            replayed?;
        }
    }
    if let Some(out) = events {
        out.commit()?;
    }
    Ok(())
}

/// The folder of a group replay's captures: made if missing.
fn make_out_dir(dir: &Path) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        bail!(
            "{}: the replay of a group recording writes a capture per link into a folder \
             (OUT names it); this is a file",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))
}

/// A link's own file from a path given for every link (`{link}` in it).
fn link_path(path: &Option<PathBuf>, link: &str, option: &str) -> Result<Option<PathBuf>> {
    path.as_deref()
        .map(|p| per_link(p, link, option))
        .transpose()
}

/// Appends the link's `--events` lines (`part`, tab-separated, a header
/// first) to the group's file as JSON lines naming `link`.
fn append_events(out: &mut OutputFile, part: &Path, link: &str) -> Result<()> {
    let file =
        std::fs::File::open(part).with_context(|| format!("cannot read {}", part.display()))?;
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        writeln!(out, "{}", json_event(link, &line))?;
    }
    Ok(())
}

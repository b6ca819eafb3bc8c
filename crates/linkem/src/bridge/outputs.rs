//! What a one-pair bridge writes beside its traffic: `--events`, `--record`,
//! the link logs (`--log-a-to-b`, `--log-b-to-a`) and the time series
//! (`--series`). Each file is created before any interface is touched, fed
//! by the stage's tap while the bridge runs, and committed once it stops.

use super::Plan;
use crate::cli::args::BridgeArgs;
use crate::sinks::events::EventsWriter;
use crate::sinks::mmlog::{LogWriter, MmLog};
use crate::sinks::record::{BridgeTap, RecordSink, LINK_TYPE_ETHERNET, SNAPLEN};
use crate::sinks::series::Series;
use anyhow::{bail, Context, Result};
use linkem_io::outfile::{check_distinct, FileUse, OutputFile};
use linkem_io::recording::RecordingMeta;
use linkem_runtime::pipeline::Tap;
use std::path::{Path, PathBuf};

/// The sinks of a run, from their creation to their commit.
pub(super) struct Outputs {
    /// `--events`, until its writer starts.
    events_file: Option<OutputFile>,
    events: Option<EventsWriter<OutputFile>>,
    /// The link logs, until their writer starts.
    log_files: Option<[Option<MmLog<OutputFile>>; 2]>,
    logs: Option<LogWriter<OutputFile>>,
    series: Option<Series>,
    record: Option<RecordSink>,
    /// The link a group's pair is (its series lines name it).
    link: Option<String>,
}

/// What the serving loop reports to: the events writer (for what it
/// skipped), the recording (for when it stops early) and the time series.
pub(super) struct Sinks<'a> {
    pub events: Option<&'a EventsWriter<OutputFile>>,
    pub record: Option<&'a mut RecordSink>,
    pub series: Option<&'a Series>,
}

impl Outputs {
    /// Checks the output paths and creates the files asked for (none is in
    /// place before it is committed, but the link logs, written as the run
    /// goes); `command_line`: what the link logs name, else this process's.
    pub(super) fn create(
        args: &BridgeArgs,
        plan: &Plan,
        command_line: Option<String>,
    ) -> Result<Outputs> {
        let outputs: Vec<FileUse> = [
            ("--events", &args.run.events),
            ("--record", &args.run.record),
            ("--log-a-to-b", &args.run.logs.log_a_to_b),
            ("--log-b-to-a", &args.run.logs.log_b_to_a),
        ]
        .into_iter()
        .filter_map(|(option, path)| path.as_ref().map(|p| FileUse::new(option, p)))
        .collect();
        check_distinct(&plan.inputs, &outputs)?;
        if let (Some(events), Some(dir)) = (&args.run.events, &args.run.record) {
            check_events_outside(events, dir)?;
        }
        let events_file = match &args.run.events {
            Some(path) => Some(OutputFile::create(path, 1 << 20)?),
            None => None,
        };
        let log_files = open_logs(args, plan, command_line)?;
        if args.run.series && args.run.stats != crate::StatsFormat::Json {
            bail!("--series prints JSON lines: it goes with --stats json");
        }
        let series = match (args.run.stats, args.run.stats_interval) {
            (crate::StatsFormat::Json, Some(every)) if args.run.series => Some(Series::new(
                (every.max(0.001) * 1e9) as u64,
                linkem_runtime::clock::now_ns(),
            )),
            _ => None,
        };
        let record = match &args.run.record {
            Some(dir) => {
                let mut meta = RecordingMeta::new(
                    plan.seed,
                    LINK_TYPE_ETHERNET,
                    SNAPLEN,
                    [args.if_a.clone(), args.if_b.clone()],
                    plan.start.clone(),
                );
                meta.options = plan.options.clone();
                meta.files = plan.read.clone();
                let sink = RecordSink::create(dir, meta, args.run.record_limit)
                    .map_err(|e| anyhow::anyhow!("--record {e}"))?;
                Some(sink)
            }
            None => None,
        };
        Ok(Outputs {
            events_file,
            events: None,
            log_files,
            logs: None,
            series,
            record,
            link: None,
        })
    }

    /// The sinks of the pair `name` of a group: its series lines name it.
    pub(super) fn for_link(mut self, name: &str) -> Outputs {
        self.link = Some(name.to_string());
        self
    }

    /// The time series, when written.
    pub(super) fn series(&self) -> Option<&Series> {
        self.series.as_ref()
    }

    /// Starts the writers; returns the tap the stage feeds them through.
    pub(super) fn start_taps(&mut self) -> Result<Option<Box<dyn Tap>>> {
        self.start_taps_with(None)
    }

    /// [`Outputs::start_taps`], the decisions going to `events` (a group's
    /// one events file) when given.
    pub(super) fn start_taps_with(
        &mut self,
        events: Option<crate::sinks::events::EventsTap>,
    ) -> Result<Option<Box<dyn Tap>>> {
        let own = start_sink(
            self.events_file.take(),
            &mut self.events,
            crate::sinks::events::start,
        )?;
        let events = events.or(own);
        let log = start_sink(
            self.log_files.take(),
            &mut self.logs,
            crate::sinks::mmlog::start,
        )?;
        let tap = BridgeTap {
            events,
            record: self.record.as_mut().and_then(RecordSink::tap),
            log,
            series: self.series.clone(),
        };
        Ok(tap.boxed())
    }

    /// What the serving loop reports to.
    pub(super) fn watched(&mut self) -> Sinks<'_> {
        Sinks {
            events: self.events.as_ref(),
            record: self.record.as_mut(),
            series: self.series.as_ref(),
        }
    }

    /// Decisions `--events` skipped, when it is written.
    pub(super) fn events_skipped(&self) -> Option<u64> {
        self.events.as_ref().map(EventsWriter::skipped)
    }

    /// The bridge did not start: no recording is left behind.
    pub(super) fn discard(self) {
        if let Some(r) = self.record {
            r.discard();
        }
    }

    /// Once the tap is dropped: the last series lines, then every file
    /// committed.
    pub(super) fn finish(self) -> Result<()> {
        if let Some(series) = &self.series {
            print_series(series, true, self.link.as_deref());
        }
        let recorded = self.record.map(RecordSink::finish);
        if let Some(w) = self.events {
            finish_events(w)?;
        }
        if let Some(w) = self.logs {
            finish_logs(w)?;
        }
        recorded.transpose()?;
        Ok(())
    }
}

/// Refuses an events file inside the recording's directory: the directory
/// holds the recording only (a recording is made in an empty directory, and
/// replay reads what it finds there).
pub(super) fn check_events_outside(events: &Path, dir: &Path) -> Result<()> {
    // Compared after following links where the paths exist, else as written.
    let full = |p: &Path| -> PathBuf {
        let p = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let mut existing = p.as_path();
        let mut rest = Vec::new();
        while !existing.exists() {
            match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_os_string());
                    existing = parent;
                }
                _ => return p.clone(),
            }
        }
        let mut out = existing
            .canonicalize()
            .unwrap_or_else(|_| existing.to_path_buf());
        out.extend(rest.iter().rev());
        out
    };
    if full(events).starts_with(full(dir)) {
        bail!(
            "--events {} is inside the --record directory {}: that directory holds the \
             recording only; write the events file elsewhere",
            events.display(),
            dir.display()
        );
    }
    Ok(())
}

/// Opens the link logs asked for (before any interface is touched, as the
/// events file is), with their headers.
fn open_logs(
    args: &BridgeArgs,
    plan: &Plan,
    command_line: Option<String>,
) -> Result<Option<[Option<MmLog<OutputFile>>; 2]>> {
    if !args.run.logs.any() {
        return Ok(None);
    }
    let init_ms = linkem_runtime::clock::now_ns() / 1_000_000;
    let command_line =
        command_line.unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" "));
    let open = |path: &Option<PathBuf>, i: usize| -> Result<Option<MmLog<OutputFile>>> {
        let Some(path) = path else { return Ok(None) };
        let header = crate::sinks::mmlog::LogHeader {
            link_name: ["uplink", "downlink"][i].into(),
            link: plan.link_words[i].clone(),
            file: path.display().to_string(),
            command_line: command_line.clone(),
            init_ms,
            capacity: plan.links[i]
                .as_ref()
                .and_then(crate::sinks::mmlog::Capacity::of),
        };
        let mut file = OutputFile::create(path, 1 << 20)?;
        // Written as the run goes: in place at once, so a killed run leaves it.
        file.publish()?;
        let log = MmLog::new(file, &header)
            .with_context(|| format!("cannot write the link log {}", path.display()))?;
        Ok(Some(log))
    };
    Ok(Some([
        open(&args.run.logs.log_a_to_b, 0)?,
        open(&args.run.logs.log_b_to_a, 1)?,
    ]))
}

/// Waits for the link logs' writer and commits the files.
fn finish_logs(writer: LogWriter<OutputFile>) -> Result<()> {
    let (files, skipped) = writer.finish().context("cannot write the link log")?;
    for file in files.into_iter().flatten() {
        file.commit()?;
    }
    if skipped > 0 {
        eprintln!(
            "linkem: link log: {skipped} decisions have no lines (the writer fell behind; \
             the log is incomplete)"
        );
    }
    Ok(())
}

/// Prints the time series' settled intervals (all of them when `last`);
/// the lines of a group's pair name its `link`.
pub(super) fn print_series(series: &Series, last: bool, link: Option<&str>) {
    let every = series.interval_s();
    for (side, start_s, bin) in series.take(linkem_runtime::clock::now_ns(), last) {
        let mut line = Series::json(["a->b", "b->a"][side], start_s, every, &bin);
        if let (Some(name), Some(obj)) = (link, line.as_object_mut()) {
            obj.insert("link".into(), name.into());
        }
        println!("{line}");
    }
}

/// Prints the group's time series' settled intervals, each line naming its
/// link (all of them when `last`).
pub(super) fn print_group_series(series: &[(&str, &Series)], last: bool) {
    for (name, s) in series {
        print_series(s, last, Some(name));
    }
}

/// Waits for the events writer; says how many decisions have no line.
pub(super) fn finish_events(writer: EventsWriter<OutputFile>) -> Result<()> {
    let (file, summary) = writer
        .finish()
        .context("--events: cannot write the events file")?;
    file.commit()?;
    if summary.skipped > 0 {
        eprintln!(
            "linkem: --events: {} decisions of {} have no line (the writer fell behind; \
             the file is incomplete)",
            summary.skipped,
            summary.written + summary.skipped
        );
    }
    Ok(())
}

/// Starts the writer of a sink whose file was opened, keeping it in `writer`;
/// returns the tap the stage feeds it through.
fn start_sink<F, T, W>(
    file: Option<F>,
    writer: &mut Option<W>,
    start: impl FnOnce(F) -> std::io::Result<(T, W)>,
) -> Result<Option<T>> {
    let Some(file) = file else { return Ok(None) };
    let (tap, started) = start(file)?;
    *writer = Some(started);
    Ok(Some(tap))
}

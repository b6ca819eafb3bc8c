//! A replay's mahimahi link logs (`--log-a-to-b`, `--log-b-to-a`).

use crate::cli::args::ReplayArgs;
use anyhow::{Context, Result};
use linkem_core::node::Decision;
use linkem_core::rules::Side;
use linkem_core::Fate;
use linkem_io::outfile::OutputFile;
use std::path::PathBuf;

/// What the link logs of a replay start from: each direction's capacity
/// (the `#` lines, as the live logs write them: [`crate::sinks::mmlog`]) and the
/// link's start when a recording stores it.
#[derive(Default)]
pub(super) struct LogStart {
    pub(super) capacity: [Option<crate::sinks::mmlog::Capacity>; 2],
    /// The live link's start (a recording's `start_ns`): the origin of the
    /// `#` lines, as of the model's traces, and of the logs' times. Without
    /// it both count from the first packet.
    pub(super) start_ns: Option<u64>,
}

impl LogStart {
    pub(super) fn of_links(
        links: [&linkem_core::LinkConfig; 2],
        start_ns: Option<u64>,
    ) -> LogStart {
        LogStart {
            capacity: links.map(crate::sinks::mmlog::Capacity::of),
            start_ns,
        }
    }
}

/// The link logs asked for: created (and so checked) before the replay
/// starts, their headers written at the first packet; their times count
/// from the link's start where a recording stores it, else from that
/// packet's stamp.
pub(super) struct ReplayLogs {
    /// `[a-to-b, b-to-a]` files until the first packet.
    files: [Option<OutputFile>; 2],
    logs: [Option<crate::sinks::mmlog::MmLog<OutputFile>>; 2],
    /// The model, in the header's words.
    link: String,
    start: LogStart,
}

impl ReplayLogs {
    pub(super) fn create(args: &ReplayArgs, start: LogStart) -> Result<Option<ReplayLogs>> {
        if args.logs.log_a_to_b.is_none() && args.logs.log_b_to_a.is_none() {
            return Ok(None);
        }
        let create = |path: &Option<PathBuf>| -> Result<Option<OutputFile>> {
            path.as_deref()
                .map(|p| OutputFile::create(p, 1 << 20).map_err(anyhow::Error::from))
                .transpose()
        };
        let mut link = args.words.join(" ");
        if let Some(config) = &args.config {
            link = format!("config {} {link}", config.display());
        }
        if let Some(rules) = &args.rules.file {
            link = format!("rules {} {link}", rules.display());
        }
        Ok(Some(ReplayLogs {
            files: [
                create(&args.logs.log_a_to_b)?,
                create(&args.logs.log_b_to_a)?,
            ],
            logs: [None, None],
            link: link.trim().to_string(),
            start,
        }))
    }

    /// Writes the headers, times counting from the link's start or else
    /// `first_ns`.
    fn start(&mut self, first_ns: u64) -> Result<()> {
        let command_line = std::env::args().collect::<Vec<_>>().join(" ");
        for (i, file) in self.files.iter_mut().enumerate() {
            let Some(file) = file.take() else { continue };
            let header = crate::sinks::mmlog::LogHeader {
                link_name: ["uplink", "downlink"][i].into(),
                link: self.link.clone(),
                file: file.name().to_string(),
                command_line: command_line.clone(),
                init_ms: self.start.start_ns.unwrap_or(first_ns) / 1_000_000,
                capacity: self.start.capacity[i].clone(),
            };
            let name = file.name().to_string();
            let mut log = crate::sinks::mmlog::MmLog::new(file, &header)
                .with_context(|| format!("cannot write the link log {name}"))?;
            if let Some(t0_ns) = self.start.start_ns {
                log.start(t0_ns);
            }
            self.logs[i] = Some(log);
        }
        Ok(())
    }

    /// Logs decision `d` of the frame that arrived at `arrival_ns`, the
    /// capture's first at `first_ns`.
    pub(super) fn decision(
        &mut self,
        first_ns: u64,
        arrival_ns: u64,
        orig_len: u32,
        d: &Decision,
    ) -> Result<()> {
        if self.files.iter().any(Option::is_some) {
            self.start(first_ns)?;
        }
        let side = match d.side {
            Side::A => 0,
            Side::B => 1,
        };
        let Some(log) = self.logs[side].as_mut() else {
            return Ok(());
        };
        let copies = match d.fate {
            Fate::Delivered => 1 + usize::from(d.duplicate),
            _ => 0,
        };
        log.packet(arrival_ns, orig_len, &[d.release_ns; 2][..copies])
            .context("cannot write the link log")
    }

    /// Writes the departures still held and the `#` lines up to `end_ns`,
    /// the replay's last instant, and puts the files in place (a capture
    /// with no packet leaves logs of a header only, times from 0).
    pub(super) fn commit(mut self, end_ns: u64) -> Result<()> {
        self.start(0)?;
        for log in self.logs.into_iter().flatten() {
            let file = log.finish(end_ns).context("cannot write the link log")?;
            file.commit()?;
        }
        Ok(())
    }
}

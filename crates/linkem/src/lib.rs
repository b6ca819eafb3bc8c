//! The pieces of the `linkem` command, as a library so that benchmarks and
//! tests drive them in-process. System calls std lacks go through `linkem-io`
//! (`sys`, `ifaces`, `caps`, `creds`), so this crate has no `unsafe`.
//!
//! Rooms by concern. The drivers run a command: `replay` (one driver over
//! any model: a link, rules, a recording) and `bridge` (either model, with
//! `live_events` for its `--events` and `live_record` for its `--record`). `control`
//! serves a running bridge's socket and metrics endpoint. `render` holds
//! everything `--stats`, the control socket and the metrics show (ipfw and
//! dnctl layouts, their JSON, counts per direction and per object). `args`,
//! `files` and `process` hold what the two drivers of a command share: their
//! arguments, the files they read (tables, configs, rule files), signals and
//! seeds. Drivers import from control, render, args, files and process;
//! control from render (and the driver-independent rooms), never from a
//! driver; render from none of them but `args`. No import cycle among files.

#![forbid(unsafe_code)]

pub mod args;
pub mod backend;
pub mod bench;
pub mod bridge;
pub mod build_info;
pub mod cli;
pub mod control;
pub mod files;
pub mod generate;
pub mod host;
pub mod host_iptables;
pub mod host_ports;
pub mod host_watchdog;
pub mod live_events;
pub mod live_record;
pub mod logplot;
pub mod mmlog;
pub mod pairs;
pub mod plot;
pub mod probe;
pub mod process;
pub mod render;
pub mod replay;
pub mod series;
pub mod shell;
pub mod shell_dns;
pub mod synth;

/// How counts are printed.
#[derive(Clone, Copy, clap::ValueEnum, PartialEq, Eq, Debug)]
pub enum StatsFormat {
    Text,
    Json,
    /// Print nothing (benchmarks).
    None,
}

/// A run ended by SIGINT or SIGTERM after cleaning up; the command exits with
/// 128 + the signal number, as a shell reports a process killed by it.
#[derive(Debug)]
pub struct Interrupted {
    pub signal: i32,
}

impl Interrupted {
    pub fn exit_code(&self) -> i32 {
        128 + self.signal
    }
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.signal {
            libc::SIGINT => "SIGINT",
            libc::SIGTERM => "SIGTERM",
            _ => "a signal",
        };
        write!(f, "interrupted by {name}; no output written")
    }
}

impl std::error::Error for Interrupted {}

/// Makes a FIFO at `path` for a test of a reader that must refuse one (this crate
/// forbids unsafe code: the mkfifo command, not the call).
#[cfg(test)]
pub(crate) fn test_mkfifo(path: &std::path::Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo {}", path.display());
}

/// `f`'s result, or a test failure naming `what` when it takes longer than
/// `limit`: a reader that hangs fails its test rather than hanging it.
#[cfg(test)]
pub(crate) fn within<T: Send + 'static>(
    limit: std::time::Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what}: still running after {limit:?}"))
}

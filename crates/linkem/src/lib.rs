//! The pieces of the `linkem` command, as a library so that benchmarks and
//! tests drive them in-process: a folder per concern. `cli` defines the
//! command line; `replay`, `bridge`, `shell` and `host` are one driver per
//! front end; `sinks` writes what a run leaves beside its output; `control`
//! serves a running bridge's socket and metrics; `render` shows counts and
//! draws figures; `tools` measures and makes data. No `unsafe` here: system
//! calls std lacks go through `linkem-io`.
//!
//! Drivers import from control, render, sinks, cli and the shared `files`
//! and `process`; control from render, never from a driver; render from
//! none of them but `cli::args`. No import cycle among files.

#![forbid(unsafe_code)]

pub mod bridge;
pub mod build_info;
pub mod cli;
pub mod control;
pub mod files;
pub mod host;
pub mod lab;
pub mod process;
pub mod render;
pub mod replay;
pub mod shell;
pub mod sinks;
pub mod tools;

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

//! The pieces of the `linkem` command, as a library so that benchmarks and
//! tests drive them in-process. System calls std lacks go through `linkem-io`
//! (`sys`, `ifaces`, `caps`, `creds`), so this crate has no `unsafe`.

#![forbid(unsafe_code)]

pub mod arrival_order;
pub mod backend;
pub mod bench;
pub mod bridge;
mod bridge_rules;
pub mod control;
pub mod plot;
pub mod probe;
pub mod replay;
pub mod replay_rules;
pub mod replay_sched;
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

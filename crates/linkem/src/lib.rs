//! The pieces of the `linkem` command, as a library so that benchmarks and
//! tests drive them in-process.

pub mod backend;
pub mod bench;
pub mod bridge;
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

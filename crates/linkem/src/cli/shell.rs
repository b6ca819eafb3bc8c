//! `linkem shell`'s command line.

use crate::bridge::backend::BackendKind;
use crate::cli::args::LinkLogArgs;
use crate::StatsFormat;
use std::path::PathBuf;

/// `linkem shell`'s arguments.
#[derive(clap::Args, Debug, Clone)]
#[command(
    mut_arg("log_a_to_b", |a| a.help(
        "Link log of what CMD sends, in mahimahi's format (`mm-link --uplink-log`)"
    )),
    mut_arg("log_b_to_a", |a| a.help("Link log of what CMD receives (`mm-link --downlink-log`)")),
)]
pub struct ShellArgs {
    /// Link words for both directions, e.g. `delay 20ms rate 10mbit`.
    pub words: Vec<String>,
    /// Link words for what CMD sends (mahimahi's uplink) only.
    #[arg(long = "a-to-b", visible_alias = "uplink", num_args = 1.., value_name = "WORDS")]
    pub a_to_b: Vec<String>,
    /// Link words for what CMD receives (mahimahi's downlink) only.
    #[arg(long = "b-to-a", visible_alias = "downlink", num_args = 1.., value_name = "WORDS")]
    pub b_to_a: Vec<String>,
    /// TOML file of link words (as `linkem bridge --config`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// ipfw/dnctl rules and Dummynet pipes instead of link words (as
    /// `linkem bridge --rules`; `in`/`a-to-b` is what CMD sends).
    #[arg(long = "rules", value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// Packet I/O of the emulator (as `linkem bridge --backend`).
    #[arg(long, value_enum, default_value = "packet")]
    pub backend: BackendKind,
    /// Let the kernel forward a direction whose link is a pass-through (as
    /// `linkem bridge --kernel-path`; needs CAP_BPF, so root only).
    #[arg(long, value_enum, default_value = "on")]
    pub kernel_path: crate::cli::args::OnOff,
    /// Print the emulator's counts at the end (text or JSON lines, on
    /// stdout after CMD's output); none by default.
    #[arg(long, value_enum, default_value = "none")]
    pub stats: StatsFormat,
    /// Also print the counts every TIME (1s, 500ms, 1min; a bare number is seconds).
    #[arg(long, value_name = "TIME", value_parser = linkem_core::units::parse_seconds)]
    pub stats_interval: Option<f64>,
    /// With `--stats json --stats-interval TIME`, also the time series: a
    /// line per direction and interval (as `linkem bridge --series`).
    #[arg(long, requires = "stats_interval")]
    pub series: bool,
    /// Drop (as 'late') a packet that cannot leave within TIME of its
    /// release time, as `linkem bridge --max-lag` does. Default 'off' here:
    /// a shell's packets are one command's own, and a packet the machine
    /// sends late is sent late, never lost, as in mahimahi.
    #[arg(long, value_name = "TIME", default_value = "off", value_parser = linkem_core::units::checked_time_or_off)]
    pub max_lag: String,
    /// The most of a core each output stage spends spinning before release
    /// times, as `linkem bridge --spin-budget` (default 5%).
    #[arg(long, value_name = "PERCENT", value_parser = crate::cli::args::parse_spin_budget)]
    pub spin_budget: Option<u32>,
    /// `--log-a-to-b` (what CMD sends) and `--log-b-to-a` (what it receives).
    #[command(flatten)]
    pub logs: LinkLogArgs,
    /// One line per decision of the model (as `linkem bridge --events`).
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,
    /// Control socket (default /run/linkem/shell-PID.sock; 'none'): `linkem
    /// ctl shell-PID link a-to-b delay 50ms` changes the link while CMD runs.
    #[arg(long, value_name = "PATH")]
    pub control: Option<String>,
    /// Serve a web page of the link at http://ADDR:PORT/ (a bare PORT is
    /// 127.0.0.1:PORT; 0 picks a port), in the caller's namespace; the address
    /// printed at start holds the token that lets the page change the link.
    #[arg(long, value_name = "ADDR:PORT")]
    pub web: Option<String>,
    /// The command to run and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

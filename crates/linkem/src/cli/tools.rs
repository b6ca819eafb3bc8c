//! The command lines of the tools: `linkem probe`, `plot`, `synth` and
//! `generate` (`bench`'s are in `cli::bench`).

use serde::Serialize;
use std::net::Ipv4Addr;
use std::path::PathBuf;

/// What `linkem probe` was asked to do, as typed.
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// Receiver's IPv4 address.
    pub dst: Ipv4Addr,
    /// UDP port of the receiver.
    #[arg(long, default_value_t = 5999)]
    pub port: u16,
    /// Network namespace of the sender (default: this one).
    #[arg(long, value_name = "NS")]
    pub src_ns: Option<String>,
    /// Network namespace of the receiver (default: this one).
    #[arg(long, value_name = "NS")]
    pub dst_ns: Option<String>,
    /// Packet rate (1kpps, 500pps) or bit rate over the frames (10mbit).
    #[arg(long, default_value = "1kpps")]
    pub rate: String,
    /// Ethernet frame size with FCS, 64..=1518.
    #[arg(long, default_value_t = 64)]
    pub size: u32,
    /// constant, burst:N (N back to back at the same average rate) or poisson.
    #[arg(long, default_value = "constant")]
    pub pattern: Pattern,
    /// Packets to send (default: 2 s worth).
    #[arg(long)]
    pub packets: Option<u64>,
    /// Send for this long instead of --packets, e.g. 5s or 1min (a bare number is seconds).
    #[arg(long, value_name = "TIME", value_parser = linkem_core::units::parse_seconds)]
    pub duration: Option<f64>,
    /// The one-way delay the path is configured for; deviations are from it.
    #[arg(long, default_value = "0ms", value_name = "TIME", value_parser = linkem_core::units::checked_time)]
    pub expect_delay: String,
    /// Seed of the Poisson schedule.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the results as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
    /// Write latency and gap plots (PNG and SVG) into DIR.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<std::path::PathBuf>,
}

/// `linkem plot`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct PlotArgs {
    /// A link log in mahimahi's format (`linkem shell --uplink-log`,
    /// `mm-link --uplink-log`).
    pub log: PathBuf,
    /// Where to write: STEM-throughput.png/.svg and STEM-delay.png/.svg
    /// (default: LOG without its extension).
    #[arg(long, value_name = "STEM")]
    pub out: Option<PathBuf>,
    /// Width of a throughput bin (mm-throughput-graph's MS_PER_BIN): a time
    /// such as 500ms or 1s; a bare number is ms, as mahimahi's.
    #[arg(long, value_name = "TIME", default_value = "500", value_parser = parse_bin_ms)]
    pub ms_per_bin: u64,
}

/// `linkem synth`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct SynthArgs {
    /// Output capture (nanosecond pcap).
    pub output: PathBuf,
    /// Number of packets.
    #[arg(long, default_value_t = 1000)]
    pub packets: u64,
    /// Frame size in bytes (60..=9000).
    #[arg(long, default_value_t = 1000)]
    pub size: u32,
    /// Offered rate, e.g. 20mbit (times follow from size and rate).
    #[arg(long, default_value = "10mbit")]
    pub rate: String,
    /// Space packets as a Poisson process (seeded) instead of evenly.
    #[arg(long)]
    pub poisson: bool,
    /// Send bursts of N back-to-back frames at the same average rate.
    #[arg(long, default_value_t = 1)]
    pub burst: u32,
    /// Seed for --poisson.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Source IPv4:PORT (default 10.0.0.1:5000).
    #[arg(long, value_name = "IP:PORT")]
    pub src: Option<String>,
    /// Destination IPv4:PORT (default 10.0.0.2:5001).
    #[arg(long, value_name = "IP:PORT")]
    pub dst: Option<String>,
    /// Spread the frames over N flows: frame i comes from source port + i mod N.
    #[arg(long, default_value_t = 1)]
    pub flows: u32,
}

/// `linkem generate`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct GenerateArgs {
    #[command(subcommand)]
    pub what: What,
}

/// What to generate.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum What {
    /// Man pages into DIR (made if missing): linkem.1 and one per command
    /// (linkem-replay.1, linkem-bridge.1, ...), replacing pages of those names.
    Man { dir: PathBuf },
    /// The bash completion script, on stdout.
    Bash,
    /// The zsh completion function (`_linkem`), on stdout.
    Zsh,
    /// The fish completions, on stdout.
    Fish,
}

/// `--ms-per-bin`: a time of at least 1 ms, in whole ms.
pub fn parse_bin_ms(text: &str) -> Result<u64, String> {
    let ns = linkem_core::units::parse_time_or_bare_ns(text, "ms").map_err(|e| e.0)?;
    if ns < 1_000_000 || !ns.is_multiple_of(1_000_000) {
        return Err(format!(
            "'{text}': a bin is a whole number of ms, at least 1ms"
        ));
    }
    Ok(ns / 1_000_000)
}

/// How packets are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Evenly, one every 1/rate.
    Constant,
    /// Bursts of N back to back, at the same average rate.
    Burst(u32),
    /// Exponential gaps (a Poisson process), seeded.
    Poisson,
}

impl std::str::FromStr for Pattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "constant" | "cbr" => Ok(Pattern::Constant),
            "poisson" => Ok(Pattern::Poisson),
            _ => match s.strip_prefix("burst") {
                Some(n) => n
                    .trim_start_matches([':', '='])
                    .parse::<u32>()
                    .ok()
                    .filter(|&n| n >= 1)
                    .map(Pattern::Burst)
                    .ok_or_else(|| format!("'{s}': a burst needs its size, e.g. burst:64")),
                None => Err(format!(
                    "'{s}': the pattern is constant, poisson or burst:N"
                )),
            },
        }
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pattern::Constant => write!(f, "constant"),
            Pattern::Burst(n) => write!(f, "burst:{n}"),
            Pattern::Poisson => write!(f, "poisson"),
        }
    }
}

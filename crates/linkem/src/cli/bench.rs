//! The arguments of `linkem bench`.

use crate::tools::probe;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Scenarios to run: delay, lossfree, tail (default: all).
    pub scenarios: Vec<String>,
    /// Every scenario at reduced length (a smoke test, under 3 minutes).
    #[arg(long)]
    pub quick: bool,
    /// Write every row, with its command line, as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write latency and gap plots (PNG and SVG) into DIR.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Backend of the linkem under test.
    #[arg(long, default_value = "auto", value_parser = ["auto", "xdp", "packet"])]
    pub backend: String,
    /// The high constant rate of the delay scenario, in pps (default: 80 % of the
    /// highest loss-free rate of delay 10ms, or 20000).
    #[arg(long = "high-rate", value_name = "PPS", value_parser = parse_pps)]
    pub high_rate_pps: Option<f64>,
}

/// `--high-rate`: a plain number of packets per second in the probe's range.
fn parse_pps(text: &str) -> Result<f64, String> {
    let plain = !text.is_empty() && text.chars().all(|c| c.is_ascii_digit() || c == '.');
    match text.parse::<f64>() {
        Ok(v) if plain && (probe::MIN_RATE_PPS..=probe::MAX_RATE_PPS).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{text}': give packets per second, {} to {}",
            probe::MIN_RATE_PPS,
            probe::MAX_RATE_PPS
        )),
    }
}

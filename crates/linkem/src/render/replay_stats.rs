//! What `--stats` prints at the end of `linkem replay`: through one link, the
//! counts per fate and the time in the link; through rules, the counts per
//! fate followed by the node ([`super::node`]). Text or JSON
//! (`StatsFormat`); the driver fills one `Tally` as it goes.

use super::node::{node_json, node_text};
use crate::cli::args::ReplayArgs;
use crate::StatsFormat;
use linkem_core::node::{Decision, Node};
use linkem_core::{Fate, FateCounts};
use serde_json::json;
use std::collections::BTreeMap;

/// What a replay counts, whatever its model, for the final report: the
/// decisions by fate, the frames written and the time in the link of each
/// delivered packet (from the instant the model was given to its release).
pub(crate) struct Tally {
    /// Decisions by fate; copies made by `duplicate` and delivered packets
    /// with a bit flipped. Sums to `arrived` at the end.
    pub(crate) counts: FateCounts,
    /// Packets read (also the next packet's tag).
    pub(crate) arrived: u64,
    /// Frames written to the output, copies included.
    pub(crate) written: u64,
    pub(crate) first_arrival_ns: Option<u64>,
    pub(crate) last_release_ns: u64,
    pub(crate) sojourn_min_ns: u64,
    pub(crate) sojourn_max_ns: u64,
    pub(crate) sojourn_sum_ns: u128,
}

impl Tally {
    pub(crate) fn new() -> Tally {
        Tally {
            counts: FateCounts::ZERO,
            arrived: 0,
            written: 0,
            first_arrival_ns: None,
            last_release_ns: 0,
            sojourn_min_ns: u64::MAX,
            sojourn_max_ns: 0,
            sojourn_sum_ns: 0,
        }
    }

    /// Counts decision `d` of a packet given to the model at `model_ns`.
    #[inline]
    pub(crate) fn count(&mut self, d: &Decision, model_ns: u64) {
        self.counts.add(d.fate);
        if d.fate != Fate::Delivered {
            return;
        }
        self.counts.duplicated += d.duplicate as u64;
        self.counts.corrupted += !d.corrupt_bits.is_empty() as u64;
        let sojourn = d.release_ns - model_ns.min(d.release_ns);
        self.sojourn_min_ns = self.sojourn_min_ns.min(sojourn);
        self.sojourn_max_ns = self.sojourn_max_ns.max(sojourn);
        self.sojourn_sum_ns += sojourn as u128;
    }

    /// The fates decided at least once, by name.
    fn fates(&self) -> BTreeMap<&'static str, u64> {
        self.counts
            .iter()
            .filter(|&(_, n)| n > 0)
            .map(|(f, n)| (f.name(), n))
            .collect()
    }
}

/// Prints a replay through one link's final counts as `--stats` asks.
pub(crate) fn print_stats(args: &ReplayArgs, link: &str, seed: u64, s: &Tally, secs: f64) {
    let counts = &s.counts;
    let replay_fates = [Fate::Delivered, Fate::QueueFull, Fate::Loss, Fate::Policed];
    let delivered = counts.get(Fate::Delivered);
    let mean_ns = if delivered > 0 {
        (s.sojourn_sum_ns / delivered as u128) as u64
    } else {
        0
    };
    let min_ns = if delivered > 0 { s.sojourn_min_ns } else { 0 };
    match args.stats {
        StatsFormat::None => {}
        StatsFormat::Json => {
            let fates: serde_json::Map<String, serde_json::Value> = replay_fates
                .iter()
                .map(|f| (f.name().to_string(), json!(counts.get(*f))))
                .collect();
            let out = json!({
                "input": args.input.display().to_string(),
                "output": args.output.display().to_string(),
                "link": link,
                "seed": seed,
                "arrived": counts.arrived(),
                "written": s.written,
                "fates": fates,
                "duplicated": counts.duplicated,
                "corrupted": counts.corrupted,
                "sojourn_ns": { "min": min_ns, "mean": mean_ns, "max": s.sojourn_max_ns },
                "first_arrival_ns": s.first_arrival_ns,
                "last_release_ns": s.last_release_ns,
                "elapsed_s": secs,
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&out).expect("a JSON value always serialises")
            );
        }
        StatsFormat::Text => {
            println!(
                "linkem replay {} -> {}",
                args.input.display(),
                args.output.display()
            );
            println!("link      {link}");
            println!("seed      {seed}");
            println!("arrived   {:>10}", counts.arrived());
            for f in replay_fates {
                let n = counts.get(f);
                let pct = if counts.arrived() > 0 {
                    100.0 * n as f64 / counts.arrived() as f64
                } else {
                    0.0
                };
                println!("{:<10}{n:>10}  {pct:6.2} %", f.name());
            }
            println!("duplicated{:>10}", counts.duplicated);
            println!("corrupted {:>10}", counts.corrupted);
            println!(
                "written   {:>10}  packets in {}",
                s.written,
                args.output.display()
            );
            println!(
                "time in link (arrival to release): min {} mean {} max {}",
                fmt_ms(min_ns),
                fmt_ms(mean_ns),
                fmt_ms(s.sojourn_max_ns)
            );
        }
    }
}

fn fmt_ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// Prints the final counts and the node's state as `--stats` asks.
pub(crate) fn report(args: &ReplayArgs, node: &Node, seed: u64, tally: &Tally, secs: f64) {
    match args.stats {
        StatsFormat::None => {}
        StatsFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&stats_json(args, node, seed, tally, secs))
                .expect("a JSON value always serialises")
        ),
        StatsFormat::Text => print!("{}", stats_text(args, node, seed, tally)),
    }
}

fn stats_text(args: &ReplayArgs, node: &Node, seed: u64, tally: &Tally) -> String {
    let fates = &tally.fates();
    let (arrived, written) = (tally.arrived, tally.written);
    let (dup, corrupted) = (tally.counts.duplicated, tally.counts.corrupted);
    let mut s = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(
        s,
        "linkem replay {} -> {} (rules)",
        args.input.display(),
        args.output.display()
    );
    let _ = writeln!(s, "seed      {seed}");
    let _ = writeln!(
        s,
        "one-pass  {}",
        if node.one_pass() { "on" } else { "off" }
    );
    let _ = writeln!(s, "arrived   {arrived:>10}");
    for (f, n) in fates {
        let _ = writeln!(s, "{f:<10}{n:>10}");
    }
    let _ = writeln!(
        s,
        "duplicated{dup:>10}\ncorrupted {corrupted:>10}\nwritten   {written:>10}  packets in {}",
        args.output.display()
    );
    s.push_str(&node_text(node));
    s
}

fn stats_json(
    args: &ReplayArgs,
    node: &Node,
    seed: u64,
    tally: &Tally,
    secs: f64,
) -> serde_json::Value {
    let fates = &tally.fates();
    let (arrived, written) = (tally.arrived, tally.written);
    let (dup, corrupted) = (tally.counts.duplicated, tally.counts.corrupted);
    let mut v = json!({
        "input": args.input.display().to_string(),
        "output": args.output.display().to_string(),
        "seed": seed,
        "arrived": arrived,
        "written": written,
        "fates": fates,
        "duplicated": dup,
        "corrupted": corrupted,
        "elapsed_s": secs,
    });
    if let (Some(o), serde_json::Value::Object(n)) = (v.as_object_mut(), node_json(node)) {
        o.extend(n);
    }
    v
}

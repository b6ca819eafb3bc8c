//! What `--stats` prints at the end of `linkem replay`: through one link, the
//! counts per fate and the time in the link; through rules, the counts per
//! node fate followed by the node ([`super::node`]). Text or JSON
//! (`StatsFormat`); the driver fills `Summary` or `Tally` as it goes.

use super::node::{node_json, node_text};
use crate::args::ReplayArgs;
use crate::StatsFormat;
use linkem_core::node::Node;
use linkem_core::{Fate, FateCounts};
use serde_json::json;
use std::collections::BTreeMap;

/// What a replay through one link counts besides the fates, for the final report.
#[derive(Default)]
pub(crate) struct Summary {
    pub(crate) written: u64,
    pub(crate) first_arrival_ns: Option<u64>,
    pub(crate) last_release_ns: u64,
    pub(crate) sojourn_min_ns: u64,
    pub(crate) sojourn_max_ns: u64,
    pub(crate) sojourn_sum_ns: u128,
}

/// Prints a replay through one link's final counts as `--stats` asks.
pub(crate) fn print_stats(
    args: &ReplayArgs,
    link: &str,
    seed: u64,
    counts: &FateCounts,
    s: &Summary,
    secs: f64,
) {
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

/// What a rules replay counts, for the final report.
#[derive(Default)]
pub(crate) struct Tally {
    /// Decisions by fate name ([`linkem_core::Fate::name`]); sums to `arrived` at the end.
    pub(crate) fates: BTreeMap<&'static str, u64>,
    /// Packets read from the capture (also the next packet's tag).
    pub(crate) arrived: u64,
    /// Packets written to the output, copies included.
    pub(crate) written: u64,
    /// Copies made by `duplicate`.
    pub(crate) dup: u64,
    /// Delivered packets with at least one bit flipped.
    pub(crate) corrupted: u64,
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
    let Tally {
        fates,
        arrived,
        written,
        dup,
        corrupted,
    } = tally;
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
    let Tally {
        fates,
        arrived,
        written,
        dup,
        corrupted,
    } = tally;
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

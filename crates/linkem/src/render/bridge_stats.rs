//! What `--stats` (and `--stats-interval`) prints during and after `linkem
//! bridge`: per direction the packets received and their fates, in flight and
//! lateness; with rules, the node's own drops per direction, the node
//! ([`super::node`]) and per pipe and queue the fates and time spent
//! ([`objects_json`]). The control socket's `stats` and the metrics endpoint
//! report the same values through [`direction_json`] and [`object_fates`].

use super::node::{node_json_listing, node_text_listing};
use crate::StatsFormat;
use linkem_core::Fate;
use linkem_runtime::pipeline::{
    DirectionStats, NodeBridge, ObjectStats, ObjectsSnapshot, SpinStats, DELAY_BUCKETS_NS,
};
use serde_json::json;
use std::time::Instant;

/// The command that runs the emulator: what its stats, control banner and
/// metrics name (`linkem bridge`, `linkem host`, `linkem shell`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FrontEnd {
    /// Two interfaces (`linkem bridge`).
    #[default]
    Bridge,
    /// This host's own traffic through netfilter queues (`linkem host`).
    Host,
    /// A command in a namespace behind the link (`linkem shell`).
    Shell,
}

impl FrontEnd {
    /// The subcommand's name.
    pub fn word(self) -> &'static str {
        match self {
            FrontEnd::Bridge => "bridge",
            FrontEnd::Host => "host",
            FrontEnd::Shell => "shell",
        }
    }
}

/// Instances of each pipe and scheduler a periodic `--stats` print lists
/// (the final line lists all; `instances` gives the count): the listing is
/// built under the node's lock, so its cost must not grow with a flood of flows.
const LISTED_PER_PIPE: usize = 100;

/// The lateness quantile `q` of a direction (0 before any packet left).
pub(crate) fn percentile_ns(s: &DirectionStats, q: f64) -> u64 {
    if s.lateness.is_empty() {
        0
    } else {
        s.lateness.value_at_quantile(q)
    }
}

/// One direction's counts as `--stats json` prints them (the control socket's
/// `stats` and the metrics endpoint report the same values): the fates
/// [`Fate::listed`] names, the node's own with `rules`.
pub fn direction_json(s: &DirectionStats, rules: bool) -> serde_json::Value {
    let fates: serde_json::Map<String, serde_json::Value> = Fate::listed(rules)
        .iter()
        .map(|f| (f.name().to_string(), json!(s.fates.get(*f))))
        .collect();
    json!({
        "direction": s.name,
        "received": s.received,
        "received_bytes": s.received_bytes,
        "delivered_bytes": s.delivered_bytes,
        "rx_kernel_drops": s.rx_kernel_drops,
        "segmented": s.segmented,
        "fates": fates,
        "in_flight": s.in_flight,
        "duplicated": s.fates.duplicated,
        "copies_sent": s.copies_sent,
        "coalesced": s.coalesced,
        "super_frames": s.super_frames,
        "whole": s.whole,
        "kernel_forwarded": s.kernel_forwarded,
        "corrupted": s.fates.corrupted,
        "lateness_ns": {
            "count": s.lateness.len(),
            "p50": percentile_ns(s, 0.5),
            "p99": percentile_ns(s, 0.99),
            "p99.9": percentile_ns(s, 0.999),
            "max": s.lateness.max(),
        },
        "delay_ms": delay_ms_json(s),
        "buffer_bytes": s.buffer_bytes,
        "huge_pages": s.huge_pages,
        "rx_wakeups": s.rx_wakeups,
        "rx_on_beat": s.rx_on_beat,
        "rx_yields_lost": s.rx_yields_lost,
        "tx_wakeups": s.tx_wakeups,
        "spin": spin_json(&s.spin),
    })
}

/// How the direction's output thread waits for releases (`--spin-budget`):
/// shares of a core and of its wake-ups to the thousandth, times in µs to
/// the tenth.
pub fn spin_json(s: &SpinStats) -> serde_json::Value {
    let share = |ppm: u32| f64::from(ppm / 1_000) / 1_000.0;
    let us = |ns: u64| (ns / 100) as f64 / 10.0;
    json!({
        "budget": share(s.budget_ppm),
        "spun_s": (s.spun_ns / 1_000_000) as f64 / 1_000.0,
        "spin_us": us(s.spin_ns),
        "covers": share(s.covers_ppm),
        "wake_late_us": { "p50": us(s.wake_late_p50_ns), "p99": us(s.wake_late_p99_ns) },
        "send_lead_us": us(s.send_lead_ns),
    })
}

/// The model's delay of what was stored, ms to the microsecond: p50, p99
/// and max; null before any packet was.
pub fn delay_ms_json(s: &DirectionStats) -> serde_json::Value {
    if s.delay.is_empty() {
        return serde_json::Value::Null;
    }
    let ms = |ns: u64| (ns as f64 / 1_000.0).round() / 1_000.0;
    json!({
        "p50": ms(s.delay.value_at_quantile(0.5)),
        "p99": ms(s.delay.value_at_quantile(0.99)),
        "max": ms(s.delay.max()),
    })
}

/// Wake-ups per packet received (both directions of a pair together): the
/// live stage's (its poll returns: an arrival, a timed wait for a release or
/// event, a change; `rx_wakeups` is one count for the stage, reported in each
/// direction) and the output threads' (timed sleeps before a release and parks
/// that ended, `tx_wakeups` summed over the directions). A packet that crosses
/// an idle link costs at least the stage's one; each output wake-up on top is
/// a hand-over from the stage to another thread.
pub fn wakeups_json(stats: &[DirectionStats]) -> serde_json::Value {
    let received: u64 = stats.iter().map(|s| s.received).sum();
    let stage = stage_count(stats, |s| s.rx_wakeups);
    let output: u64 = stats.iter().map(|s| s.tx_wakeups).sum();
    let per = |n: u64| {
        if received == 0 {
            serde_json::Value::Null
        } else {
            json!((n as f64 / received as f64 * 1000.0).round() / 1000.0)
        }
    };
    json!({ "stage": per(stage), "output": per(output) })
}

/// Prints the directions' counts as `--stats` asks: a table, or one JSON line
/// (with `events_skipped` when the bridge writes `--events`).
pub(crate) fn print_stats(
    format: StatsFormat,
    front: FrontEnd,
    stats: &[DirectionStats],
    secs: f64,
    seed: u64,
    last: bool,
    events_skipped: Option<u64>,
) {
    match format {
        StatsFormat::None => {}
        StatsFormat::Json => {
            let dirs: Vec<serde_json::Value> =
                stats.iter().map(|s| direction_json(s, false)).collect();
            let out = json!({ "front": front.word(), "elapsed_s": secs, "final": last, "seed": seed, "directions": dirs, "wakeups_per_packet": wakeups_json(stats) });
            print_json_line(out, events_skipped);
        }
        StatsFormat::Text => {
            println!(
                "linkem {} after {secs:.1} s{}",
                front.word(),
                if last { " (final)" } else { "" }
            );
            println!("{}", text_header());
            for s in stats {
                println!("{}", text_row(s));
            }
            print_notes(stats, "");
        }
    }
}

/// Prints one JSON stats line, with `events_skipped` when the bridge writes
/// `--events`.
fn print_json_line(mut out: serde_json::Value, events_skipped: Option<u64>) {
    if let Some(n) = events_skipped {
        out["events_skipped"] = json!(n);
    }
    println!(
        "{}",
        serde_json::to_string(&out).expect("a JSON value always serialises")
    );
}

/// Below the text table: what left merged, per direction that sent
/// super-frames, what the kernel forwarded, and the stage's lost yields
/// (`prefix`: the pair's name in a bridge of several).
fn print_notes(stats: &[DirectionStats], prefix: &str) {
    for s in stats.iter().filter(|s| s.super_frames > 0) {
        println!(
            "{prefix}{}: coalesced {} of the delivered frames into {} super-frames \
             ({} of them in received super-frames that crossed whole)",
            s.name, s.coalesced, s.super_frames, s.whole
        );
    }
    for s in stats.iter().filter(|s| s.kernel_forwarded > 0) {
        println!(
            "{prefix}{}: the kernel forwarded {} of the delivered frames itself, while the \
             link was a pass-through (--kernel-path)",
            s.name, s.kernel_forwarded
        );
    }
    if let Some(note) = yields_note(stage_count(stats, |s| s.rx_yields_lost)) {
        println!("{prefix}{note}");
    }
}

/// A count of the live stage: one for the stage, reported in each
/// direction it serves.
fn stage_count(stats: &[DirectionStats], count: fn(&DirectionStats) -> u64) -> u64 {
    stats.iter().map(count).max().unwrap_or(0)
}

/// Why frames may have cost the stage a wake-up of their own: yields that
/// lost its core (`rx_yields_lost`), none said when there were none.
fn yields_note(lost: u64) -> Option<String> {
    (lost > 0).then(|| {
        format!(
            "the stage lost its core at {lost} yields (a busy task beside linkem, or a stall of \
             the machine): two within 2 s pause its lingering and beats for 0.1-10 s (--linger)"
        )
    })
}

/// The columns of the text table.
fn text_header() -> String {
    format!(
        "{:<6}{:>10}{:>9}{:>10}{:>10}{:>11}{:>8}{:>8}{:>13}{:>6}{:>8}{:>9}{:>10}  lateness p50/p99/p99.9/max",
        "dir",
        "received",
        "k-drops",
        "segmented",
        "delivered",
        "queue-full",
        "loss",
        "policed",
        "backpressure",
        "late",
        "too-big",
        "tx-error",
        "in-flight"
    )
}

/// One direction's line of the text table.
fn text_row(s: &DirectionStats) -> String {
    format!(
        "{:<6}{:>10}{:>9}{:>10}{:>10}{:>11}{:>8}{:>8}{:>13}{:>6}{:>8}{:>9}{:>10}  {}/{}/{}/{}",
        s.name,
        s.received,
        s.rx_kernel_drops,
        s.segmented,
        s.fates.get(Fate::Delivered),
        s.fates.get(Fate::QueueFull),
        s.fates.get(Fate::Loss),
        s.fates.get(Fate::Policed),
        s.fates.get(Fate::Backpressure),
        s.fates.get(Fate::Late),
        s.fates.get(Fate::TooBig),
        s.fates.get(Fate::TxError),
        s.in_flight,
        fmt_ns(percentile_ns(s, 0.5)),
        fmt_ns(percentile_ns(s, 0.99)),
        fmt_ns(percentile_ns(s, 0.999)),
        fmt_ns(s.lateness.max()),
    )
}

/// One pair of a bridge of several (`--pair`) as the stats list it.
pub(crate) struct PairStats<'a> {
    /// IF_A-IF_B, as its control socket is named.
    pub name: &'a str,
    pub if_a: &'a str,
    pub if_b: &'a str,
    pub seed: u64,
    pub stats: Vec<DirectionStats>,
    /// Why the pair's link stopped while the others went on (an interface
    /// gone, an I/O error); `None` while it runs.
    pub stopped: Option<String>,
}

/// Prints the counts of a bridge of several pairs: a table whose lines begin
/// with the pair's name, or one JSON line whose `pairs` list each pair's
/// directions as a one-pair bridge's `directions` are (each pair's counts add
/// up on their own).
pub(crate) fn print_pairs_stats(
    format: StatsFormat,
    pairs: &[PairStats<'_>],
    secs: f64,
    last: bool,
) {
    match format {
        StatsFormat::None => {}
        StatsFormat::Json => {
            let list: Vec<serde_json::Value> = pairs
                .iter()
                .map(|p| {
                    let dirs: Vec<serde_json::Value> =
                        p.stats.iter().map(|s| direction_json(s, false)).collect();
                    json!({
                        "pair": p.name,
                        "a": p.if_a,
                        "b": p.if_b,
                        "seed": p.seed,
                        "stopped": p.stopped,
                        "directions": dirs,
                        "wakeups_per_packet": wakeups_json(&p.stats),
                    })
                })
                .collect();
            let out = json!({ "elapsed_s": secs, "final": last, "pairs": list });
            print_json_line(out, None);
        }
        StatsFormat::Text => {
            println!(
                "linkem bridge of {} pairs after {secs:.1} s{}",
                pairs.len(),
                if last { " (final)" } else { "" }
            );
            let width = pairs.iter().map(|p| p.name.len()).max().unwrap_or(4).max(4) + 2;
            println!("{:<width$}{}", "pair", text_header());
            for p in pairs {
                for s in &p.stats {
                    println!("{:<width$}{}", p.name, text_row(s));
                }
            }
            for p in pairs {
                print_notes(&p.stats, &format!("{} ", p.name));
            }
            for p in pairs {
                if let Some(why) = &p.stopped {
                    println!("{}: stopped: {why}", p.name);
                }
            }
        }
    }
}

/// The bridge's counts (with the node's own drops beside each direction's
/// fates), then the node's pipes, rules and schedulers as replay prints them.
// The counts and what names them, as print_stats takes them, plus the node.
#[allow(clippy::too_many_arguments)]
pub(crate) fn print_rules_stats(
    format: StatsFormat,
    front: FrontEnd,
    bridge: &NodeBridge,
    stats: &[DirectionStats],
    started: Instant,
    seed: u64,
    last: bool,
    events_skipped: Option<u64>,
) {
    let secs = started.elapsed().as_secs_f64();
    match format {
        StatsFormat::None => {}
        StatsFormat::Json => {
            let dirs: Vec<serde_json::Value> =
                stats.iter().map(|s| direction_json(s, true)).collect();
            let most = if last { usize::MAX } else { LISTED_PER_PIPE };
            let node = bridge.with_model(|n| node_json_listing(n, most));
            let objects = objects_json(&bridge.object_stats());
            let out = json!({
                "front": front.word(),
                "elapsed_s": secs,
                "final": last,
                "seed": seed,
                "directions": dirs,
                "node": node,
                "objects": objects,
            });
            print_json_line(out, events_skipped);
        }
        StatsFormat::Text => {
            print_stats(format, front, stats, secs, seed, last, None);
            println!(
                "{:<6}{:>10}{:>12}{:>10}{:>10}{:>10}",
                "dir", "denied", "flow-limit", "red-drop", "aqm-drop", "flushed"
            );
            for s in stats {
                let f = &s.fates;
                println!(
                    "{:<6}{:>10}{:>12}{:>10}{:>10}{:>10}",
                    s.name,
                    f.get(Fate::Denied),
                    f.get(Fate::FlowLimit),
                    f.get(Fate::RedDrop),
                    f.get(Fate::AqmDrop),
                    f.get(Fate::Flushed)
                );
            }
            let most = if last { usize::MAX } else { LISTED_PER_PIPE };
            print!("{}", bridge.with_model(|n| node_text_listing(n, most)));
        }
    }
}

/// The fates a pipe or queue counts, by name (as the directions name them).
pub fn object_fates(s: &ObjectStats) -> [(&'static str, u64); 8] {
    [
        Fate::Delivered,
        Fate::Loss,
        Fate::QueueFull,
        Fate::Policed,
        Fate::Backpressure,
        Fate::RedDrop,
        Fate::AqmDrop,
        Fate::FlowLimit,
    ]
    .map(|f| (f.name(), s.fates.get(f)))
}

/// `--stats json`'s `objects`: per pipe and per queue, the packets by fate,
/// the packets and bytes in it now, and the histogram of time spent in it
/// (`le_s`: bucket bounds in seconds; `counts`: cumulative, as Prometheus
/// gives them, the last one all).
pub fn objects_json(s: &ObjectsSnapshot) -> serde_json::Value {
    let one = |key: &str, n: u32, o: &ObjectStats| {
        let fates: serde_json::Map<String, serde_json::Value> = object_fates(o)
            .iter()
            .map(|(k, v)| ((*k).to_string(), json!(v)))
            .collect();
        json!({
            key: n,
            "fates": fates,
            "delivered_bytes": o.delivered_bytes,
            "queued_packets": o.queued_packets,
            "queued_bytes": o.queued_bytes,
            "time_in_pipe": {
                "le_s": DELAY_BUCKETS_NS.iter().map(|b| *b as f64 / 1e9).collect::<Vec<_>>(),
                "counts": o.delay.cumulative().to_vec(),
                "sum_s": o.delay.sum_ns as f64 / 1e9,
                "count": o.delay.count,
            },
        })
    };
    json!({
        "pipes": s.pipes.iter().map(|(n, o)| one("pipe", *n, o)).collect::<Vec<_>>(),
        "queues": s.queues.iter().map(|(n, o)| one("queue", *n, o)).collect::<Vec<_>>(),
    })
}

fn fmt_ns(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.2}ms", ns as f64 / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1}us", ns as f64 / 1e3)
    } else {
        format!("{ns}ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_yields_are_told_below_the_table_only_when_there_were_some() {
        assert_eq!(yields_note(0), None);
        let note = yields_note(3).unwrap();
        assert!(
            note.contains("at 3 yields") && note.contains("--linger"),
            "{note}"
        );
    }
}

//! `linkem bench`: sets up `nsA <-veth-> DUT <-veth-> nsB`, runs the device
//! under test (linkem with some link words, or the Linux bridge as the
//! no-emulation baseline) and `linkem probe` through it, and reports how close
//! the path came to what was configured (MoonEm §6's measurements; docs/model.md).
//!
//! Scenarios:
//! - `delay`: accuracy of `delay 10ms` at a low and a high constant rate, 64
//!   and 1500 bytes, and bursts of 64: median, p99 and worst deviation from
//!   10 ms after subtracting the zero-delay baseline of the same run (the
//!   median one-way delay of the path without an emulator: the Linux bridge at
//!   the same rate and size; linkem's own zero-delay row is shown beside); plus
//!   inter-packet-gap preservation (bursts added or split) of each run.
//! - `lossfree`: the highest rate at which each link loses no more than its
//!   configuration says (`delay 10ms`: nothing; `loss 1%`: 1 %; `rate` at 90 %
//!   of the offered load: 10 %; all three), 64 and 1500 bytes, found on a
//!   doubling ladder of rates.
//! - `tail`: the tail of the delay distribution (p99, p99.9, max) through
//!   `delay 10ms` at 1 kpps for linkem as started by default, the same with
//!   `--coalesce off`, and for each backend under each real-time policy, in
//!   rounds that alternate the settings. Each is measured at the same time as
//!   the Linux bridge between a twin pair of hosts and the machine's timer
//!   floor, so that a stall of the shared machine falls on all three: each
//!   percentile is judged beyond the bridge's same percentile of the same
//!   seconds, and the p99.9 against the floor's. It ends with whether the
//!   default is within those bounds and as good as the best setting. Then sparse
//!   traffic (1, 10, 100 pps) through small delays (0, 20, 50, 200 µs), each
//!   beside the twin's bridge at the same rate, after the machine's timer
//!   wake-up floor, with
//!   linkem's wake-ups per packet: what waking costs a packet that finds the
//!   path idle.
//!
//! Each scenario also measures the Linux bridge in the same run.
//!
//! The module is split where the work is: `args` holds the command's arguments,
//! `dut` starts and stops the device under test, `measure` runs a measurement
//! (one device, one probe) into a row, `scenarios` decides what to measure and
//! how to judge it, and this file runs the scenarios and prints the tables.
//! Each file imports only files below it in that order, none this one.

use crate::tools::probe::us;
use anyhow::{bail, Context, Result};
use linkem_io::netns::{self, Topology};
use std::time::Instant;

mod dut;
mod measure;
mod scenarios;

pub use crate::cli::bench::BenchArgs;
pub use measure::Row;
use measure::{pps_text, Bench};

/// The markdown tables.
// Kept whole: the report's tables, one after another, in the order they print.
pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::new();
    if rows.iter().any(|r| r.scenario == "delay") {
        s += "### Delay accuracy (`delay 10ms`; deviation = one-way delay − 10 ms − the Linux bridge's p50 at the same rate and size)\n\n";
        s += "| device | configured | offered | sent | delivered | lost | one-way p50 µs | deviation p50 µs | p99 µs | max µs | sender late max µs | note |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        for r in rows.iter().filter(|r| r.scenario == "delay") {
            let (d50, d99, dmax) = match &r.deviation_ns {
                Some(d) => (us(d.p50), us(d.p99), us(d.max)),
                None => ("-".into(), "-".into(), "-".into()),
            };
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.device,
                r.configured,
                r.offered,
                r.sent,
                r.delivered,
                r.lost,
                us(r.analysis.delay_ns.p50),
                d50,
                d99,
                dmax,
                us(r.analysis.send_error_ns.max),
                r.note
            );
        }
        s += "\nA sender that was late by as much as the worst deviation points at a stall of the whole machine (both ran late), not at the emulator.\n";
        s += "\n### Inter-packet gaps (pairs of consecutive packets; a gap under 20 µs is back to back)\n\n";
        s += "| device | configured | offered | sender gap p50 µs | receiver gap p50 µs | \\|change\\| p50 µs | p99 µs | bursts added | bursts split | pairs |\n|---|---|---|---|---|---|---|---|---|---|\n";
        for r in rows.iter().filter(|r| r.scenario == "delay") {
            let a = &r.analysis;
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.device,
                r.configured,
                r.offered,
                us(a.send_gap_ns.p50),
                us(a.recv_gap_ns.p50),
                us(a.gap_change_ns.p50),
                us(a.gap_change_ns.p99),
                a.bursts_added,
                a.bursts_split,
                a.gap_pairs
            );
        }
        s += "\n";
    }
    if rows.iter().any(|r| r.scenario == "tail") {
        s += &tail_markdown(rows);
    }
    if rows.iter().any(|r| r.scenario == "sparse") {
        s += &sparse_markdown(rows);
    }
    if rows.iter().any(|r| r.scenario == "lossfree") {
        s += "### Highest loss-free rate (loss within the 99.9 % bound of what the link is configured to lose)\n\n";
        s += "| device | configured | size | offered | highest passing rate | sent | delivered | lost | expected loss | note |\n|---|---|---|---|---|---|---|---|---|---|\n";
        for r in rows.iter().filter(|r| r.scenario == "lossfree") {
            s += &format!(
                "| {} | {} | {} B | {} | {} | {} | {} | {} | {:.2} % | {} |\n",
                r.device,
                r.configured,
                r.size_bytes,
                r.offered,
                r.lossfree_pps.map(pps_text).unwrap_or_else(|| "-".into()),
                r.sent,
                r.delivered,
                r.lost,
                r.expected_loss.unwrap_or(0.0) * 100.0,
                r.note
            );
        }
        s += "\n";
    }
    if rows.iter().any(|r| !r.repeat.is_empty()) {
        s += "### To repeat a row (names are this run's; `linkem bench` builds them afresh)\n\n";
        for r in rows.iter().filter(|r| !r.repeat.is_empty()) {
            s += &format!(
                "- {}, {}, {}, {}: `{}`\n",
                r.scenario, r.device, r.configured, r.offered, r.repeat
            );
        }
        s += "\n";
    }
    s
}

/// The frames linkem dropped as `late` (held past `--max-lag` in a stall of
/// the machine) in a row's final counts, both directions; "-" for a row
/// without counts.
fn late_drops(r: &Row) -> String {
    r.linkem_counts
        .as_ref()
        .and_then(|c| c["directions"].as_array())
        .map(|dirs| {
            dirs.iter()
                .filter_map(|d| d["fates"]["late"].as_u64())
                .sum::<u64>()
                .to_string()
        })
        .unwrap_or_else(|| "-".into())
}

/// The sparse rows of `tail`: small delays at 1-100 pps beside the bridge
/// and the timer floor, with linkem's wake-ups per packet.
fn sparse_markdown(rows: &[Row]) -> String {
    let mut s = String::from(
        "### Sparse traffic and small delays (64 B at 1, 10, 100 pps; each linkem row measured at the same time as the Linux bridge between twin hosts at the same rate; beyond = one-way delay − the configured delay − the bridge's same percentile)\n\n",
    );
    s += "| device | configured | offered | delivered / sent | late drops | one-way p50 µs | bridge p50 µs | beyond p50 µs | p99 µs | p99.9 µs | max µs | wake-ups per packet: stage / output |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for r in rows.iter().filter(|r| r.scenario == "sparse") {
        let d = r.deviation_ns.as_ref();
        let f = |v: Option<i64>| v.map(us).unwrap_or_else(|| "-".into());
        let wakeups = scenarios::wakeups_per_packet(r.linkem_counts.as_ref())
            .map_or_else(|| "-".into(), |(rx, tx)| format!("{rx:.2} / {tx:.2}"));
        s += &format!(
            "| {} | {} | {} | {} / {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.device,
            r.configured,
            r.offered,
            r.delivered,
            r.sent,
            late_drops(r),
            us(r.analysis.delay_ns.p50),
            f(r.beside.as_ref().map(|b| b.bridge.delay_ns.p50)),
            f(d.map(|d| d.p50)),
            f(d.map(|d| d.p99)),
            f(d.map(|d| d.p99_9)),
            f(d.map(|d| d.max)),
            wakeups,
        );
    }
    s += &format!(
        "\nThe {} rows say how late this machine wakes a real-time thread from a timed sleep (beyond = lateness): no emulator that wakes for a packet does better. The Linux bridge forwards in the sender's own context and wakes nothing.\n\n",
        scenarios::TIMER_FLOOR
    );
    s
}

/// The median over `pairs` of each one's tail divided by its floor (none
/// when no floor is above zero).
fn median_ratio(pairs: impl Iterator<Item = (i64, i64)>) -> Option<f64> {
    let mut ratios: Vec<f64> = pairs
        .filter(|&(_, floor)| floor > 0)
        .map(|(tail, floor)| tail as f64 / floor as f64)
        .collect();
    if ratios.is_empty() {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    Some(ratios[ratios.len() / 2])
}

/// A ratio as the tables print it ("0.88x"; "-" for none).
fn ratio_text(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "-".into(), |r| format!("{r:.2}x"))
}

/// The `tail` table and its verdicts: does linkem as users start it add no
/// more than 1 µs to the bridge's median, and no more to its p99.9 than the
/// machine's timer floor at the same time; is it as good as the best setting?
fn tail_markdown(rows: &[Row]) -> String {
    let mut s = String::from(
        "### Tail by backend and real-time policy (`delay 10ms`, 64 B at 1 kpps; each row measured at the same time as the Linux bridge between twin hosts and the machine's timer floor; beyond = one-way delay − 10 ms − the bridge's same percentile)\n\n",
    );
    s += "| device | round | sent | delivered | lost | one-way p50 µs | bridge p50 µs | beyond p50 µs | p99 µs | p99.9 µs | timer floor p99.9 µs | max µs | late drops | sender late max µs |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    let tail: Vec<&Row> = rows.iter().filter(|r| r.scenario == "tail").collect();
    let f = |v: Option<i64>| v.map(us).unwrap_or_else(|| "-".into());
    for r in &tail {
        let d = r.deviation_ns.as_ref();
        let beside = r.beside.as_ref();
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.device,
            r.note,
            r.sent,
            r.delivered,
            r.lost,
            us(r.analysis.delay_ns.p50),
            f(beside.map(|b| b.bridge.delay_ns.p50)),
            f(d.map(|d| d.p50)),
            f(d.map(|d| d.p99)),
            f(d.map(|d| d.p99_9)),
            f(beside.map(|b| b.timer_floor_ns.p99_9)),
            f(d.map(|d| d.max)),
            late_drops(r),
            us(r.analysis.send_error_ns.max),
        );
    }
    // Per setting, its rounds: p50 and p99.9 beyond the bridge, and the floor's p99.9.
    type Rounds = Vec<(i64, i64, i64)>;
    let mut by_setting: Vec<(String, Rounds)> = Vec::new();
    for r in &tail {
        let (Some(d), Some(b)) = (r.deviation_ns.as_ref(), r.beside.as_ref()) else {
            continue;
        };
        let v = (d.p50, d.p99_9, b.timer_floor_ns.p99_9);
        match by_setting.iter_mut().find(|(n, _)| *n == r.device) {
            Some((_, vs)) => vs.push(v),
            None => by_setting.push((r.device.clone(), vec![v])),
        }
    }
    // Median and range over the rounds: on a shared VM a single stall of a
    // few ms sets a round's p99.9 at 1 kpps, so a difference smaller than the
    // spread of one setting's rounds is noise, not the setting.
    let spread = |mut v: Vec<i64>| {
        v.sort_unstable();
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let summary: Vec<(String, (i64, i64, i64))> = by_setting
        .iter()
        .map(|(n, vs)| (n.clone(), spread(vs.iter().map(|v| v.1).collect())))
        .collect();
    let range = |r: &(i64, i64, i64)| format!("{}-{}", us(r.1), us(r.2));
    if let Some((_, rounds)) = by_setting.iter().find(|r| r.0 == "linkem (defaults)") {
        let n = rounds.len();
        let p50 = spread(rounds.iter().map(|v| v.0).collect());
        let within = rounds.iter().filter(|v| v.1 <= v.2).count();
        s += &format!(
            "\nlinkem as started by default, beyond the bridge beside it: p50 {} µs over rounds ({}, median {}); p99.9 within the timer floor's p99.9 of the same seconds ({} µs) in {within} of {n} rounds, {} of the floor's at the median round. A packet held for 10 ms meets every stall of the machine in that time; the bridge holds it for microseconds.\n",
            rounds.iter().map(|v| us(v.0)).collect::<Vec<_>>().join(", "),
            range(&p50),
            us(p50.0),
            rounds.iter().map(|v| us(v.2)).collect::<Vec<_>>().join(", "),
            ratio_text(median_ratio(rounds.iter().map(|v| (v.1, v.2)))),
        );
    }
    // Every setting's rounds together: a stall sets one round's p99.9, so
    // whether the tail is the machine's or the emulator's shows in many.
    let all: Vec<(i64, i64)> = by_setting
        .iter()
        .flat_map(|(_, vs)| vs.iter().map(|v| (v.1, v.2)))
        .collect();
    if !all.is_empty() {
        s += &format!(
            "\nEvery row of every setting: p99.9 within the timer floor's of the same seconds in {} of {}, {} of the floor's at the median row.\n",
            all.iter().filter(|v| v.0 <= v.1).count(),
            all.len(),
            ratio_text(median_ratio(all.iter().copied())),
        );
    }
    if let (Some(default), Some(best)) = (
        summary.iter().find(|r| r.0 == "linkem (defaults)"),
        summary.iter().min_by_key(|r| r.1 .0),
    ) {
        let verdict = if default.1 .0 <= best.1 .2 {
            "within the best setting's spread over rounds: as good as the best in this run"
        } else {
            "above every round of the best setting: worse than the best in this run"
        };
        s += &format!(
            "\np99.9 beyond the bridge, median (range) over rounds: {}.\nlinkem as started by default: {} µs ({}); the best setting, {}: {} µs ({}); the default is {verdict}.\n",
            summary
                .iter()
                .map(|r| format!("{} {} µs ({})", r.0, us(r.1 .0), range(&r.1)))
                .collect::<Vec<_>>()
                .join(", "),
            us(default.1 .0),
            range(&default.1),
            best.0,
            us(best.1 .0),
            range(&best.1),
        );
    }
    s + "\n"
}

pub fn run(args: &BenchArgs) -> Result<()> {
    let mut scenarios = args.scenarios.clone();
    if scenarios.is_empty() {
        scenarios = vec!["lossfree".into(), "delay".into(), "tail".into()];
    }
    for s in &scenarios {
        if !["delay", "gaps", "lossfree", "tail"].contains(&s.as_str()) {
            bail!("unknown scenario '{s}': the scenarios are delay (with gaps), lossfree and tail");
        }
    }
    netns::check_prerequisites().map_err(|e| anyhow::anyhow!("linkem bench: {e}"))?;
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        if let Some(json) = &args.json {
            // Found now, not after the minutes of the run.
            crate::render::figures::refuse_json_among_plots(json, dir, |name| {
                crate::render::figures::is_plot_file(name, |stem| {
                    stem.starts_with("delay-") || stem.starts_with("gaps-")
                })
            })?;
        }
    }
    let started = Instant::now();
    let extra = dut::extra_args();
    if !extra.is_empty() {
        eprintln!(
            "linkem bench: every linkem bridge runs with {} (from {})",
            extra.join(" "),
            dut::EXTRA_ARGS_VAR
        );
    }
    // Namespaces left by a bench that was killed outright.
    let _ = netns::cleanup_dead("lkbench");
    let interrupted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, interrupted.clone())
            .context("cannot install the signal handler")?;
    }
    // The hosts keep their offloads, as users' hosts do: the probe's UDP leaves
    // them with checksums for linkem to finish.
    let topo = Topology::two_hosts_stock(&netns::unique_prefix("lkbench"))
        .map_err(|e| anyhow::anyhow!("cannot build the namespaces: {e}"))?;
    let b = Bench {
        topo: &topo,
        args,
        interrupted,
    };
    let mut rows = Vec::new();
    let mut high = args.high_rate_pps;
    if scenarios.iter().any(|s| s == "lossfree") {
        let found = scenarios::lossfree(&b, &mut rows)?;
        if high.is_none() {
            high = found.map(|f| f * 0.8);
        }
    }
    if scenarios.iter().any(|s| s == "delay" || s == "gaps") {
        scenarios::delay(&b, high.unwrap_or(20_000.0), &mut rows)?;
    }
    if scenarios.iter().any(|s| s == "tail") {
        let twin = scenarios::TwinBridge::up(&b)?;
        scenarios::tail(&b, &twin, &mut rows)?;
        scenarios::sparse(&b, &twin, &mut rows)?;
    }
    drop(topo);
    let table = markdown(&rows);
    println!("{table}");
    println!(
        "linkem bench {}{} --backend {}: {:.0} s.",
        scenarios.join(" "),
        if args.quick { " --quick" } else { "" },
        args.backend,
        started.elapsed().as_secs_f64()
    );
    if let Some(path) = &args.json {
        let out = serde_json::json!({
            "clock": "CLOCK_TAI",
            "quick": args.quick,
            "backend": args.backend,
            "elapsed_s": started.elapsed().as_secs_f64(),
            "rows": rows,
        });
        linkem_io::outfile::write_all(
            path,
            (serde_json::to_string_pretty(&out)? + "\n").as_bytes(),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_ratio_is_of_each_tail_to_its_own_floor() {
        // Ratios 2.0, 0.5, 1.0 (a floor of 0 is left out): the median is 1.0.
        let pairs = [(200, 100), (50, 100), (300, 300), (7, 0)];
        assert_eq!(median_ratio(pairs.into_iter()), Some(1.0));
        assert_eq!(median_ratio([(5, 0)].into_iter()), None);
        assert_eq!(ratio_text(Some(0.875)), "0.88x");
        assert_eq!(ratio_text(None), "-");
    }
}

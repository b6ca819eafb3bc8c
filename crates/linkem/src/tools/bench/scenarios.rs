//! What each scenario measures and how it is judged (see the module doc of `bench`).

use super::dut::{Dut, Running};
use super::measure::{pps_text, repeat_on, timer_floor, twin_cfg, Bench, Row, DELAY_NS};
use crate::tools::probe::{self, Pattern, ProbeConfig};
use anyhow::Result;
use linkem_io::netns::{self, Topology};

/// Rate words for `rate` at `share` of `pps` frames of `size` bytes (with FCS)
/// each, counting Ethernet's preamble and gap (`overhead ethernet`).
fn rate_words(pps: f64, size: u32, share: f64) -> Vec<String> {
    let wire_bytes = (size - 4 + 24) as f64;
    let kbit = (share * pps * wire_bytes * 8.0 / 1000.0).round().max(1.0);
    vec![
        "rate".into(),
        format!("{kbit:.0}kbit"),
        "overhead".into(),
        "ethernet".into(),
    ]
}

/// The plots of one delay case: deviation of linkem with delay, without, and of the
/// Linux bridge, each against the bridge's median; gaps before and after linkem.
fn plot_delay_case(
    dir: &std::path::Path,
    tag: &str,
    offered: &str,
    base_p50: i64,
    [run, base, bridge]: [&probe::ProbeRun; 3],
) -> Result<()> {
    let stem = dir.join(format!("delay-{tag}"));
    crate::render::figures::latency(
        &stem,
        &format!("delay 10ms, {offered}: deviation"),
        &[
            crate::render::figures::LatencySeries {
                label: "linkem delay 10ms (minus 10 ms and the bridge's p50)".into(),
                delay_ns: &run.series.delay_ns,
                expected_ns: DELAY_NS as i64 + base_p50,
            },
            crate::render::figures::LatencySeries {
                label: "linkem, no delay (minus the bridge's p50)".into(),
                delay_ns: &base.series.delay_ns,
                expected_ns: base_p50,
            },
            crate::render::figures::LatencySeries {
                label: "Linux bridge (minus its p50)".into(),
                delay_ns: &bridge.series.delay_ns,
                expected_ns: base_p50,
            },
        ],
    )?;
    crate::render::figures::gaps(
        &dir.join(format!("gaps-{tag}")),
        &format!("delay 10ms, {offered}: gaps"),
        &run.series.send_gap_ns,
        &run.series.recv_gap_ns,
    )?;
    Ok(())
}

/// The link words of a row, "-" for none.
fn configured(dut: &Dut) -> String {
    match dut.words() {
        [] => "-".into(),
        w => w.join(" "),
    }
}

/// The settings the `tail` scenario compares: linkem as users start it, the
/// same with coalescing on transmit off (the probe's UDP frames never merge:
/// what is left is its cost per frame), then every backend under every
/// real-time policy.
fn tail_settings() -> Vec<Vec<String>> {
    let mut v = vec![Vec::new(), vec!["--coalesce".into(), "off".into()]];
    for backend in ["xdp", "packet"] {
        for realtime in ["off", "timed", "out", "all"] {
            v.push(
                ["--backend", backend, "--realtime", realtime]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            );
        }
    }
    v
}

/// `tail`: the delay distribution's tail through `delay 10ms` at 1 kpps of
/// 64-byte frames for each backend and real-time policy, in rounds that
/// alternate the settings. Each linkem row is measured beside the Linux
/// bridge between a twin pair of hosts and the machine's timer floor, all
/// three at the same time, so that a stall of the shared machine falls on
/// all of them: each percentile is judged beyond the bridge's same
/// percentile of the same seconds (what the emulator adds to the path's own
/// tail), and the tail against the floor of the same seconds.
pub(super) fn tail(b: &Bench<'_>, twin: &TwinBridge, rows: &mut Vec<Row>) -> Result<()> {
    let (rounds, secs) = if b.args.quick { (1, 1.0) } else { (3, 10.0) };
    let pps = 1000.0;
    let size = 64;
    let packets = (pps * secs) as u64;
    let offered = format!("{size} B, constant, {}", pps_text(pps));
    let delay_words: Vec<String> = vec!["delay".into(), "10ms".into()];
    for round in 1..=rounds {
        let note = format!("round {round} of {rounds}");
        for options in tail_settings() {
            let dut = Dut::LinkemWith {
                options,
                words: delay_words.clone(),
            };
            let cfg = b.probe_cfg(size, Pattern::Constant, pps, packets, DELAY_NS);
            rows.push(twin.measure(b, dut, &cfg, &offered, &note)?);
        }
    }
    Ok(())
}

/// The twin hosts and the Linux bridge between them, up for the whole of
/// `tail` (and its sparse rows): what each linkem row is measured beside.
pub(super) struct TwinBridge {
    // Dropped first: the bridge before its hosts.
    _bridge: Running,
    topo: Topology,
}

impl TwinBridge {
    pub(super) fn up(b: &Bench<'_>) -> Result<TwinBridge> {
        let topo = Topology::two_hosts_stock(&netns::unique_prefix("lkbench"))
            .map_err(|e| anyhow::anyhow!("cannot build the twin hosts: {e}"))?;
        let bridge = Running::start(&topo, &Dut::LinuxBridge, &b.args.backend)?;
        Ok(TwinBridge {
            _bridge: bridge,
            topo,
        })
    }

    /// Measures `dut` with `cfg` beside the twin's bridge (at the same rate)
    /// and the timer floor; the row's percentiles are beyond the bridge's.
    fn measure(
        &self,
        b: &Bench<'_>,
        dut: Dut,
        cfg: &ProbeConfig,
        offered: &str,
        note: &str,
    ) -> Result<Row> {
        let (run, counts, beside) = b.measure_beside(&dut, cfg, &self.topo)?;
        let beyond = beyond_bridge(
            &run.analysis.delay_ns,
            &beside.bridge.delay_ns,
            cfg.expected_delay_ns as i64,
        );
        let mut row = tail_row(b, dut, &run, Some(beyond), counts, cfg, offered, note);
        row.repeat += &format!(
            "; at the same time, the Linux bridge between twin hosts: {}; and {FLOOR_BESIDE}",
            repeat_on(
                &self.topo,
                &b.args.backend,
                &Dut::LinuxBridge,
                &twin_cfg(&self.topo, cfg)
            )
        );
        row.beside = Some(beside);
        Ok(row)
    }
}

/// How the timer floor beside each `tail` row is taken.
const FLOOR_BESIDE: &str = "a SCHED_FIFO thread sleeping to deadlines \
     0.75-1.25 ms apart (`chrt -f 50 cyclictest -i 1000` measures about the same)";

/// The device name of the timer floor rows of the sparse part of `tail`.
pub(super) const TIMER_FLOOR: &str = "timer wake-up (platform floor)";

/// Each percentile of `delay` minus `expected_ns` and the same percentile of
/// the bridge's delay: what the emulator adds at that point of the distribution.
pub(super) fn beyond_bridge(
    delay: &probe::stats::Percentiles,
    bridge: &probe::stats::Percentiles,
    expected_ns: i64,
) -> probe::stats::Percentiles {
    probe::stats::Percentiles {
        count: delay.count,
        min: delay.min - expected_ns - bridge.min,
        p50: delay.p50 - expected_ns - bridge.p50,
        p99: delay.p99 - expected_ns - bridge.p99,
        p99_9: delay.p99_9 - expected_ns - bridge.p99_9,
        p99_99: delay.p99_99 - expected_ns - bridge.p99_99,
        max: delay.max - expected_ns - bridge.max,
        mean: delay.mean - expected_ns as f64 - bridge.mean,
    }
}

#[allow(clippy::too_many_arguments)]
fn tail_row(
    b: &Bench<'_>,
    dut: Dut,
    run: &probe::ProbeRun,
    beyond: Option<probe::stats::Percentiles>,
    counts: Option<serde_json::Value>,
    cfg: &ProbeConfig,
    offered: &str,
    note: &str,
) -> Row {
    Row {
        scenario: "tail".into(),
        device: dut.name(),
        configured: configured(&dut),
        offered: offered.to_string(),
        size_bytes: cfg.size_bytes,
        pattern: cfg.pattern.to_string(),
        rate_pps: cfg.rate_pps,
        sent: run.analysis.sent,
        delivered: run.analysis.received,
        lost: run.analysis.lost,
        deviation_ns: beyond,
        baseline_p50_ns: None,
        analysis: run.analysis.clone(),
        lossfree_pps: None,
        expected_loss: None,
        note: note.to_string(),
        repeat: b.repeat(&dut, cfg),
        linkem_counts: counts,
        beside: None,
    }
}

pub(super) fn delay(b: &Bench<'_>, high_pps: f64, rows: &mut Vec<Row>) -> Result<()> {
    let quick = b.args.quick;
    let low = 1000.0;
    let cases: Vec<(u32, Pattern, f64, &str)> = vec![
        (64, Pattern::Constant, low, "low rate"),
        (1500, Pattern::Constant, low, "low rate"),
        (64, Pattern::Constant, high_pps, "high rate"),
        (1500, Pattern::Constant, high_pps.min(60_000.0), "high rate"),
        (64, Pattern::Burst(64), low, "bursts of 64"),
    ];
    let secs = if quick { 1.0 } else { 8.0 };
    for (size, pattern, pps, label) in cases {
        let packets = ((pps * secs) as u64).max(200);
        let delay = Dut::Linkem(vec!["delay".into(), "10ms".into()]);
        let zero = Dut::Linkem(vec![]);
        let zero_cfg = b.probe_cfg(size, pattern, pps, packets, 0);
        let cfg = b.probe_cfg(size, pattern, pps, packets, DELAY_NS);
        let (base, base_counts) = b.measure(&zero, &zero_cfg)?;
        let (run, counts) = b.measure(&delay, &cfg)?;
        let (bridge, _) = b.measure(&Dut::LinuxBridge, &zero_cfg)?;
        // The path's own delay: the same veths and namespaces without an emulator.
        let base_p50 = bridge.analysis.delay_ns.p50;
        let offered = format!("{size} B, {pattern}, {}", pps_text(pps));
        if let Some(dir) = &b.args.plot {
            let tag = format!(
                "{size}B-{}-{pps:.0}pps",
                pattern.to_string().replace(':', "")
            );
            plot_delay_case(dir, &tag, &offered, base_p50, [&run, &base, &bridge])?;
        }
        for (dut, r, dev, c, cfg, note) in [
            (
                zero,
                &base,
                None,
                base_counts,
                &zero_cfg,
                "linkem without delay",
            ),
            (
                delay,
                &run,
                Some(run.analysis.deviation_ns.shifted(base_p50)),
                counts,
                &cfg,
                label,
            ),
            (
                Dut::LinuxBridge,
                &bridge,
                None,
                None,
                &zero_cfg,
                "no emulation: the zero-delay baseline",
            ),
        ] {
            rows.push(Row {
                scenario: "delay".into(),
                device: dut.name(),
                configured: configured(&dut),
                offered: offered.clone(),
                size_bytes: size,
                pattern: pattern.to_string(),
                rate_pps: pps,
                sent: r.analysis.sent,
                delivered: r.analysis.received,
                lost: r.analysis.lost,
                deviation_ns: dev,
                baseline_p50_ns: Some(base_p50),
                analysis: r.analysis.clone(),
                lossfree_pps: None,
                expected_loss: None,
                note: note.to_string(),
                repeat: b.repeat(&dut, cfg),
                linkem_counts: c,
                beside: None,
            });
        }
    }
    Ok(())
}

/// A label, the link words and the share of the offered rate for `rate` (None:
/// the Linux bridge), and the loss the link is configured for.
type LossfreeCase = (&'static str, Option<(Vec<String>, f64)>, f64);

/// The highest rung passed so far.
type Passed = (
    f64,
    probe::ProbeRun,
    Option<serde_json::Value>,
    ProbeConfig,
    Dut,
);

/// The links the lossfree scenario climbs the ladder with.
fn lossfree_cases() -> Vec<LossfreeCase> {
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        ("no emulation", None, 0.0),
        ("delay 10ms", Some((words(&["delay", "10ms"]), 0.0)), 0.0),
        (
            "loss 1%",
            Some((words(&["loss", "1%", "seed", "1"]), 0.0)),
            0.01,
        ),
        ("rate 90% of offered", Some((vec![], 0.9)), 0.10),
        (
            "delay 10ms loss 1% rate 90%",
            Some((words(&["delay", "10ms", "loss", "1%", "seed", "1"]), 0.9)),
            1.0 - 0.9 * 0.99,
        ),
    ]
}

/// One rung: Ok(passed) or Err(why it failed).
fn try_rung(
    b: &Bench<'_>,
    size: u32,
    case: &LossfreeCase,
    pps: f64,
    secs: f64,
) -> Result<std::result::Result<Passed, String>> {
    let (label, words, expected) = case;
    let dut = match words {
        None => Dut::LinuxBridge,
        Some((w, share)) => {
            let mut w = w.clone();
            if *share > 0.0 {
                w.extend(rate_words(pps, size, *share));
            }
            Dut::Linkem(w)
        }
    };
    let expect = if label.contains("delay") { DELAY_NS } else { 0 };
    let packets = ((pps * secs) as u64).max(500);
    let cfg = b.probe_cfg(size, Pattern::Constant, pps, packets, expect);
    let (run, counts) = b.measure(&dut, &cfg)?;
    let a = &run.analysis;
    let achieved = if a.send_gap_ns.count > 0 && a.send_gap_ns.mean > 0.0 {
        1e9 / a.send_gap_ns.mean
    } else {
        pps
    };
    if achieved < 0.95 * pps {
        return Ok(Err(format!(
            "sender reached only {} at {}",
            pps_text(achieved),
            pps_text(pps)
        )));
    }
    // The rate shaper's queue (1000 packets) absorbs the start, so a
    // shaped link loses a little less than its share at first.
    let bound = probe::stats::loss_bound(a.sent, *expected);
    if a.loss_ratio > bound {
        return Ok(Err(format!(
            "{:.2} % lost at {} (bound {:.2} %)",
            a.loss_ratio * 100.0,
            pps_text(pps),
            bound * 100.0
        )));
    }
    Ok(Ok((pps, run, counts, cfg, dut)))
}

/// Climbs `rungs` until one fails, then narrows the step between the last rung passed
/// and the first failed `refine` times. Returns the best rung passed and why the next
/// one failed.
fn climb(
    rungs: &[f64],
    refine: usize,
    mut try_rate: impl FnMut(f64) -> Result<std::result::Result<Passed, String>>,
) -> Result<(Option<Passed>, String)> {
    let mut best: Option<Passed> = None;
    let mut note = String::new();
    let mut failed_at = None;
    for &pps in rungs {
        match try_rate(pps)? {
            Ok(p) => best = Some(p),
            Err(why) => {
                note = why;
                failed_at = Some(pps);
                break;
            }
        }
    }
    if let (Some(mut hi), Some(mut lo)) = (failed_at, best.as_ref().map(|b| b.0)) {
        for _ in 0..refine {
            let mid = ((lo + hi) / 2.0 / 1000.0).round() * 1000.0;
            if mid <= lo || mid >= hi {
                break;
            }
            match try_rate(mid)? {
                Ok(p) => {
                    lo = mid;
                    best = Some(p);
                }
                Err(why) => {
                    hi = mid;
                    note = why;
                }
            }
        }
    }
    Ok((best, note))
}

/// The row of one lossfree case: its best rung, or the lowest that failed.
fn lossfree_row(
    b: &Bench<'_>,
    case: &LossfreeCase,
    size: u32,
    rungs: &[f64],
    best: Option<Passed>,
    note: String,
) -> Row {
    let (label, words, expected) = case;
    let offered = format!(
        "{size} B constant, ladder {}..{}",
        pps_text(rungs[0]),
        pps_text(rungs[rungs.len() - 1])
    );
    let device = if words.is_none() {
        Dut::LinuxBridge.name()
    } else {
        "linkem".into()
    };
    let (rate_pps, analysis, lossfree_pps, repeat, linkem_counts, note) = match best {
        Some((pps, run, counts, cfg, dut)) => (
            pps,
            run.analysis,
            Some(pps),
            b.repeat(&dut, &cfg),
            counts,
            if note.is_empty() {
                "every rung passed".into()
            } else {
                format!("next rung: {note}")
            },
        ),
        None => (
            rungs[0],
            probe::stats::analyse(&[], &[], &[], 0).0,
            None,
            String::new(),
            None,
            format!("lowest rung failed: {note}"),
        ),
    };
    Row {
        scenario: "lossfree".into(),
        device,
        configured: label.to_string(),
        offered,
        size_bytes: size,
        pattern: "constant".into(),
        rate_pps,
        sent: analysis.sent,
        delivered: analysis.received,
        lost: analysis.lost,
        deviation_ns: None,
        baseline_p50_ns: None,
        analysis,
        lossfree_pps,
        expected_loss: Some(*expected),
        note,
        repeat,
        linkem_counts,
        beside: None,
    }
}

/// The `lossfree` scenario; returns the highest loss-free rate of `delay 10ms` at 64 bytes.
pub(super) fn lossfree(b: &Bench<'_>, rows: &mut Vec<Row>) -> Result<Option<f64>> {
    let ladder: Vec<f64> = if b.args.quick {
        vec![5_000.0, 20_000.0, 80_000.0]
    } else {
        vec![
            5_000.0, 10_000.0, 20_000.0, 40_000.0, 80_000.0, 160_000.0, 320_000.0,
        ]
    };
    let secs = if b.args.quick { 0.5 } else { 2.0 };
    let refine = if b.args.quick { 0 } else { 2 };
    let mut delay_64 = None;
    for size in [64u32, 1500] {
        // 1500-byte frames stop at 100 kpps (1.2 Gbit/s): beyond it the probe
        // measures its own sender on this kind of machine.
        let mut rungs: Vec<f64> = ladder
            .iter()
            .map(|&p| if size == 1500 { p.min(100_000.0) } else { p })
            .collect();
        rungs.dedup();
        for case in lossfree_cases() {
            let (best, note) = climb(&rungs, refine, |pps| try_rung(b, size, &case, pps, secs))?;
            if case.0 == "delay 10ms" && size == 64 {
                delay_64 = best.as_ref().map(|b| b.0);
            }
            rows.push(lossfree_row(b, &case, size, &rungs, best, note));
        }
    }
    Ok(delay_64)
}

/// The sparse rates of `tail` (packets per second): a keep-alive, a game
/// tick, a request stream; each packet finds linkem idle.
const SPARSE_PPS: [f64; 3] = [1.0, 10.0, 100.0];
/// The small delays of `tail`'s sparse rows, ns: a data-centre link's.
const SMALL_DELAYS_NS: [u64; 4] = [0, 20_000, 50_000, 200_000];
/// The timed sleeps of the sparse rows' timer floor: a small delay's, and a
/// sparse stream's gap.
const FLOOR_PERIODS_US: [u64; 2] = [50, 10_000];

/// `tail`'s sparse rows: 64-byte frames at 1, 10 and 100 pps through linkem
/// as users start it with `delay 0`, 20 µs, 50 µs and 200 µs, each measured
/// beside the twin's Linux bridge at the same rate and judged beyond it
/// (what linkem adds when every packet finds it asleep); after the
/// machine's timer wake-up floor for a short sleep and a sparse stream's
/// gap, so the reader sees what waking costs on this machine whatever the
/// emulator.
pub(super) fn sparse(b: &Bench<'_>, twin: &TwinBridge, rows: &mut Vec<Row>) -> Result<()> {
    let secs = if b.args.quick { 2.0 } else { 20.0 };
    let size = 64;
    for period_us in FLOOR_PERIODS_US {
        let period = std::time::Duration::from_micros(period_us);
        // At least a few hundred wake-ups, at most `secs`.
        let floor_secs = (period.as_secs_f64() * 500.0).min(secs);
        let late = timer_floor(floor_secs, period);
        let analysis = probe::stats::Analysis {
            sent: late.count,
            received: late.count,
            delay_ns: late,
            deviation_ns: late,
            ..Default::default()
        };
        rows.push(Row {
            scenario: "sparse".into(),
            device: TIMER_FLOOR.into(),
            configured: format!(
                "sleeps of {}",
                linkem_core::units::format_time_ns(period_us * 1000)
            ),
            offered: "-".into(),
            size_bytes: 0,
            pattern: "-".into(),
            rate_pps: 1e6 / period_us as f64,
            sent: late.count,
            delivered: late.count,
            lost: 0,
            deviation_ns: Some(late),
            baseline_p50_ns: None,
            analysis,
            lossfree_pps: None,
            expected_loss: None,
            note: "how late the wake-up is".into(),
            repeat: format!(
                "a SCHED_FIFO thread sleeping to deadlines {period_us} µs apart \
                 (`chrt -f 50 cyclictest -i {period_us}` measures the same)"
            ),
            linkem_counts: None,
            beside: None,
        });
    }
    for pps in SPARSE_PPS {
        // A few packets even in a quick run at 1 pps.
        let packets = ((pps * secs) as u64).max(3);
        let offered = format!("{size} B, constant, {}", pps_text(pps));
        for delay_ns in SMALL_DELAYS_NS {
            let dut = Dut::LinkemWith {
                options: Vec::new(),
                words: vec!["delay".into(), linkem_core::units::format_time_ns(delay_ns)],
            };
            let cfg = b.probe_cfg(size, Pattern::Constant, pps, packets, delay_ns);
            let mut row = twin.measure(b, dut, &cfg, &offered, "")?;
            row.scenario = "sparse".into();
            rows.push(row);
        }
    }
    Ok(())
}

/// Wake-ups per packet received of a linkem row's final counts: the live
/// stage's (`rx_wakeups`, one count for its pair: the first direction's)
/// and the output threads' (`tx_wakeups`, both directions); None for a row
/// without counts.
pub(super) fn wakeups_per_packet(counts: Option<&serde_json::Value>) -> Option<(f64, f64)> {
    let dirs = counts?["directions"].as_array()?;
    let received: u64 = dirs.iter().filter_map(|d| d["received"].as_u64()).sum();
    let rx = dirs.first()?["rx_wakeups"].as_u64()?;
    let tx: u64 = dirs.iter().filter_map(|d| d["tx_wakeups"].as_u64()).sum();
    let per = |n: u64| n as f64 / received.max(1) as f64;
    Some((per(rx), per(tx)))
}

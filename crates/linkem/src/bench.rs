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
//!
//! Each scenario also measures the Linux bridge in the same run.

use crate::probe::{self, stats::Analysis, stats::Percentiles, us, Pattern, ProbeConfig};
use anyhow::{bail, Context, Result};
use linkem_io::netns::{self, Topology};
use serde::Serialize;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Scenarios to run: delay, lossfree (default: all).
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
    #[arg(long = "high-rate", value_name = "PPS")]
    pub high_rate_pps: Option<f64>,
}

const DELAY_NS: u64 = 10_000_000;
const PORT: u16 = 5998;

/// The device under test.
#[derive(Debug, Clone)]
enum Dut {
    Linkem(Vec<String>),
    LinuxBridge,
}

impl Dut {
    fn name(&self) -> String {
        match self {
            Dut::Linkem(w) if w.is_empty() => "linkem (no impairment)".into(),
            Dut::Linkem(w) => format!("linkem {}", w.join(" ")),
            Dut::LinuxBridge => "Linux bridge".into(),
        }
    }
}

/// A running device under test.
struct Running {
    child: Option<Child>,
    bridge: Option<String>,
}

impl Running {
    fn start(topo: &Topology, dut: &Dut, backend: &str) -> Result<Running> {
        match dut {
            Dut::Linkem(words) => {
                let exe = std::env::current_exe().context("the linkem executable")?;
                let mut child = Command::new(exe)
                    .args(["bridge", &topo.emu_a, &topo.emu_b, "--stats", "json"])
                    .args(["--backend", backend])
                    .args(words)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .context("cannot start linkem bridge")?;
                std::thread::sleep(Duration::from_millis(500));
                if let Some(status) = child.try_wait()? {
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        let _ = e.read_to_string(&mut err);
                    }
                    bail!("linkem bridge {} exited ({status}): {err}", words.join(" "));
                }
                Ok(Running {
                    child: Some(child),
                    bridge: None,
                })
            }
            Dut::LinuxBridge => {
                let br = format!("{}br", topo.prefix);
                let ip = |args: &[&str]| netns::ip(args).map(drop);
                ip(&["link", "add", &br, "type", "bridge"])?;
                let r = Running {
                    child: None,
                    bridge: Some(br.clone()),
                };
                ip(&["link", "set", &topo.emu_a, "master", &br])?;
                ip(&["link", "set", &topo.emu_b, "master", &br])?;
                ip(&["link", "set", &br, "up"])?;
                std::thread::sleep(Duration::from_millis(200));
                Ok(r)
            }
        }
    }

    /// Stops the device; for linkem, returns its final counts (JSON).
    fn stop(mut self) -> Result<Option<serde_json::Value>> {
        self.halt()
    }

    fn halt(&mut self) -> Result<Option<serde_json::Value>> {
        if let Some(br) = self.bridge.take() {
            let _ = netns::ip(&["link", "del", &br]);
        }
        let Some(mut child) = self.child.take() else {
            return Ok(None);
        };
        // Safety: kill with the pid of our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let t = Instant::now();
        while child.try_wait()?.is_none() {
            if t.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                bail!("linkem bridge did not stop on SIGINT");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut out = String::new();
        if let Some(mut o) = child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        Ok(out.lines().rev().find_map(|l| serde_json::from_str(l).ok()))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

/// One measured row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub scenario: String,
    pub device: String,
    pub configured: String,
    pub offered: String,
    pub size_bytes: u32,
    pub pattern: String,
    pub rate_pps: f64,
    pub sent: u64,
    pub delivered: u64,
    pub lost: u64,
    /// Delay figures minus the configured delay and the zero-delay baseline's median.
    pub deviation_ns: Option<Percentiles>,
    pub baseline_p50_ns: Option<i64>,
    pub analysis: Analysis,
    /// For `lossfree`: the highest rate that passed, pps (None: not even the lowest).
    pub lossfree_pps: Option<f64>,
    pub expected_loss: Option<f64>,
    pub note: String,
    pub repeat: String,
    pub linkem_counts: Option<serde_json::Value>,
}

struct Bench<'a> {
    topo: &'a Topology,
    args: &'a BenchArgs,
    /// SIGINT or SIGTERM: stop after the current run and clean up.
    interrupted: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Bench<'_> {
    fn probe_cfg(
        &self,
        size: u32,
        pattern: Pattern,
        rate_pps: f64,
        packets: u64,
        expect: u64,
    ) -> ProbeConfig {
        ProbeConfig {
            dst: std::net::SocketAddrV4::new(self.topo.addr_b, PORT),
            src_ns: Some(self.topo.ns_a.clone()),
            dst_ns: Some(self.topo.ns_b.clone()),
            pattern,
            rate_pps,
            size_bytes: size,
            packets,
            expected_delay_ns: expect,
            seed: 1,
            drain_ns: 2 * expect + 300_000_000,
        }
    }

    fn repeat(&self, dut: &Dut, cfg: &ProbeConfig) -> String {
        let probe = format!(
            "linkem probe {} --port {} --src-ns {} --dst-ns {} --rate {:.0}pps --size {} --pattern {} --packets {} --expect-delay {}",
            cfg.dst.ip(),
            cfg.dst.port(),
            self.topo.ns_a,
            self.topo.ns_b,
            cfg.rate_pps,
            cfg.size_bytes,
            cfg.pattern,
            cfg.packets,
            linkem_core::units::format_time_ns(cfg.expected_delay_ns),
        );
        match dut {
            Dut::Linkem(w) => format!(
                "linkem bridge {} {} --backend {} {} & {probe}",
                self.topo.emu_a,
                self.topo.emu_b,
                self.args.backend,
                w.join(" ")
            ),
            Dut::LinuxBridge => format!(
                "ip link add BR type bridge; ip link set {} master BR; ip link set {} master BR; ip link set BR up; {probe}",
                self.topo.emu_a, self.topo.emu_b
            ),
        }
    }

    fn measure(
        &self,
        dut: &Dut,
        cfg: &ProbeConfig,
    ) -> Result<(probe::ProbeRun, Option<serde_json::Value>)> {
        if self.interrupted.load(std::sync::atomic::Ordering::Relaxed) {
            bail!("interrupted");
        }
        let running = Running::start(self.topo, dut, &self.args.backend)?;
        let run = probe::run(cfg);
        let counts = running.stop()?;
        if self.interrupted.load(std::sync::atomic::Ordering::Relaxed) {
            // Returning unwinds to `run`, whose Topology removes the namespaces.
            bail!("interrupted");
        }
        Ok((run?, counts))
    }
}

fn pps_text(pps: f64) -> String {
    if pps >= 1000.0 {
        format!("{:.1} kpps", pps / 1000.0)
    } else {
        format!("{pps:.0} pps")
    }
}

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

fn delay_scenario(b: &Bench<'_>, high_pps: f64, rows: &mut Vec<Row>) -> Result<()> {
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
            let stem = dir.join(format!("delay-{tag}"));
            crate::plot::latency(
                &stem,
                &format!("delay 10ms, {offered}: deviation"),
                &[
                    crate::plot::LatencySeries {
                        label: "linkem delay 10ms (minus 10 ms and the bridge's p50)".into(),
                        delay_ns: &run.series.delay_ns,
                        expected_ns: DELAY_NS as i64 + base_p50,
                    },
                    crate::plot::LatencySeries {
                        label: "linkem, no delay (minus the bridge's p50)".into(),
                        delay_ns: &base.series.delay_ns,
                        expected_ns: base_p50,
                    },
                    crate::plot::LatencySeries {
                        label: "Linux bridge (minus its p50)".into(),
                        delay_ns: &bridge.series.delay_ns,
                        expected_ns: base_p50,
                    },
                ],
            )?;
            crate::plot::gaps(
                &dir.join(format!("gaps-{tag}")),
                &format!("delay 10ms, {offered}: gaps"),
                &run.series.send_gap_ns,
                &run.series.recv_gap_ns,
            )?;
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
                configured: match &dut {
                    Dut::Linkem(w) if !w.is_empty() => w.join(" "),
                    _ => "-".into(),
                },
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

fn lossfree_scenario(b: &Bench<'_>, rows: &mut Vec<Row>) -> Result<Option<f64>> {
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
        let configs: Vec<LossfreeCase> = vec![
            ("no emulation", None, 0.0),
            (
                "delay 10ms",
                Some((vec!["delay".into(), "10ms".into()], 0.0)),
                0.0,
            ),
            (
                "loss 1%",
                Some((
                    vec!["loss".into(), "1%".into(), "seed".into(), "1".into()],
                    0.0,
                )),
                0.01,
            ),
            ("rate 90% of offered", Some((vec![], 0.9)), 0.10),
            (
                "delay 10ms loss 1% rate 90%",
                Some((
                    vec![
                        "delay".into(),
                        "10ms".into(),
                        "loss".into(),
                        "1%".into(),
                        "seed".into(),
                        "1".into(),
                    ],
                    0.9,
                )),
                1.0 - 0.9 * 0.99,
            ),
        ];
        for (label, words, expected) in configs {
            // One rung: Ok(passed) or Err(why it failed).
            let try_rate = |pps: f64| -> Result<std::result::Result<Passed, String>> {
                let dut = match &words {
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
                let bound = probe::stats::loss_bound(a.sent, expected);
                if a.loss_ratio > bound {
                    return Ok(Err(format!(
                        "{:.2} % lost at {} (bound {:.2} %)",
                        a.loss_ratio * 100.0,
                        pps_text(pps),
                        bound * 100.0
                    )));
                }
                Ok(Ok((pps, run, counts, cfg, dut)))
            };
            let mut best: Option<Passed> = None;
            let mut note = String::new();
            let mut failed_at = None;
            for &pps in &rungs {
                match try_rate(pps)? {
                    Ok(p) => best = Some(p),
                    Err(why) => {
                        note = why;
                        failed_at = Some(pps);
                        break;
                    }
                }
            }
            // Narrow the step between the last rung passed and the first failed.
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
            if label == "delay 10ms" && size == 64 {
                delay_64 = best.as_ref().map(|b| b.0);
            }
            let offered = format!(
                "{size} B constant, ladder {}..{}",
                pps_text(rungs[0]),
                pps_text(rungs[rungs.len() - 1])
            );
            match best {
                Some((pps, run, counts, cfg, dut)) => rows.push(Row {
                    scenario: "lossfree".into(),
                    device: if matches!(dut, Dut::LinuxBridge) {
                        dut.name()
                    } else {
                        "linkem".into()
                    },
                    configured: label.into(),
                    offered,
                    size_bytes: size,
                    pattern: "constant".into(),
                    rate_pps: pps,
                    sent: run.analysis.sent,
                    delivered: run.analysis.received,
                    lost: run.analysis.lost,
                    deviation_ns: None,
                    baseline_p50_ns: None,
                    analysis: run.analysis.clone(),
                    lossfree_pps: Some(pps),
                    expected_loss: Some(expected),
                    note: if note.is_empty() {
                        "every rung passed".into()
                    } else {
                        format!("next rung: {note}")
                    },
                    repeat: b.repeat(&dut, &cfg),
                    linkem_counts: counts,
                }),
                None => rows.push(Row {
                    scenario: "lossfree".into(),
                    device: if words.is_none() {
                        "Linux bridge".into()
                    } else {
                        "linkem".into()
                    },
                    configured: label.into(),
                    offered,
                    size_bytes: size,
                    pattern: "constant".into(),
                    rate_pps: rungs[0],
                    sent: 0,
                    delivered: 0,
                    lost: 0,
                    deviation_ns: None,
                    baseline_p50_ns: None,
                    analysis: probe::stats::analyse(&[], &[], &[], 0).0,
                    lossfree_pps: None,
                    expected_loss: Some(expected),
                    note: format!("lowest rung failed: {note}"),
                    repeat: String::new(),
                    linkem_counts: None,
                }),
            }
        }
    }
    Ok(delay_64)
}

/// The markdown tables.
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

pub fn run(args: &BenchArgs) -> Result<()> {
    let mut scenarios = args.scenarios.clone();
    if scenarios.is_empty() {
        scenarios = vec!["lossfree".into(), "delay".into()];
    }
    for s in &scenarios {
        if !["delay", "gaps", "lossfree"].contains(&s.as_str()) {
            bail!("unknown scenario '{s}': the scenarios are delay (with gaps) and lossfree");
        }
    }
    netns::check_prerequisites().map_err(|e| anyhow::anyhow!("linkem bench: {e}"))?;
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let started = Instant::now();
    // Namespaces left by a bench that was killed outright.
    let _ = netns::cleanup_dead("lkbench");
    let interrupted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, interrupted.clone())
            .context("cannot install the signal handler")?;
    }
    let topo = Topology::two_hosts(&netns::unique_prefix("lkbench"))
        .map_err(|e| anyhow::anyhow!("cannot build the namespaces: {e}"))?;
    let b = Bench {
        topo: &topo,
        args,
        interrupted,
    };
    let mut rows = Vec::new();
    let mut high = args.high_rate_pps;
    if scenarios.iter().any(|s| s == "lossfree") {
        let found = lossfree_scenario(&b, &mut rows)?;
        if high.is_none() {
            high = found.map(|f| f * 0.8);
        }
    }
    if scenarios.iter().any(|s| s == "delay" || s == "gaps") {
        delay_scenario(&b, high.unwrap_or(20_000.0), &mut rows)?;
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
        std::fs::write(path, serde_json::to_string_pretty(&out)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

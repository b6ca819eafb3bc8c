//! One measurement: a device under test started, `linkem probe` run through
//! it, and the row it gives; what the scenarios and the report share.

use super::dut::{Dut, Running};
use crate::cli::bench::BenchArgs;
use crate::tools::probe::{self, stats::Analysis, stats::Percentiles, Pattern, ProbeConfig};
use anyhow::{bail, Context, Result};
use linkem_io::netns::Topology;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};

/// The delay the scenarios configure.
pub(super) const DELAY_NS: u64 = 10_000_000;
/// The probe's UDP port.
const PORT: u16 = 5998;

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
    /// What was measured at the same time as this row (`tail`'s rows).
    pub beside: Option<Beside>,
}

/// What `tail` measures at the same time as each linkem row, so that a stall
/// of the shared machine falls on all three: the Linux bridge between a twin
/// pair of hosts at the same rate, and the timer floor.
#[derive(Debug, Clone, Serialize)]
pub struct Beside {
    /// The twin pair's probe through the Linux bridge.
    pub bridge: Analysis,
    /// How late a SCHED_FIFO thread woke from sleeps meanwhile.
    pub timer_floor_ns: Percentiles,
}

/// What every measurement of a run shares: the namespaces, the arguments and
/// the stop flag.
pub(super) struct Bench<'a> {
    pub(super) topo: &'a Topology,
    pub(super) args: &'a BenchArgs,
    /// SIGINT or SIGTERM: stop after the current run and clean up.
    pub(super) interrupted: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Bench<'_> {
    pub(super) fn probe_cfg(
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
            start_tai_ns: None,
        }
    }

    pub(super) fn repeat(&self, dut: &Dut, cfg: &ProbeConfig) -> String {
        repeat_on(self.topo, &self.args.backend, dut, cfg)
    }

    pub(super) fn measure(
        &self,
        dut: &Dut,
        cfg: &ProbeConfig,
    ) -> Result<(probe::ProbeRun, Option<serde_json::Value>)> {
        let (run, counts, _) = self.measure_with(dut, cfg, None)?;
        Ok((run, counts))
    }

    /// [`Bench::measure`] with the twin's bridge probed at the same rate and
    /// the timer floor taken while the device's probe runs.
    pub(super) fn measure_beside(
        &self,
        dut: &Dut,
        cfg: &ProbeConfig,
        twin: &Topology,
    ) -> Result<(probe::ProbeRun, Option<serde_json::Value>, Beside)> {
        let (run, counts, beside) = self.measure_with(dut, cfg, Some(twin))?;
        Ok((run, counts, beside.expect("measured beside the twin")))
    }

    fn measure_with(
        &self,
        dut: &Dut,
        cfg: &ProbeConfig,
        twin: Option<&Topology>,
    ) -> Result<(probe::ProbeRun, Option<serde_json::Value>, Option<Beside>)> {
        if self.interrupted.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        let mut running = Running::start(self.topo, dut, &self.args.backend)?;
        // A failure on either side ends the other: the probe stops if linkem exits,
        // and linkem is stopped (below) whatever became of the probe.
        let stop = AtomicBool::new(false);
        let finished = AtomicBool::new(false);
        // The two probes in step, the twin's half a mean gap after the
        // device's: at 1 kpps each sender spins for the last 100 µs before a
        // send, and the device releases each packet as its sender is about to
        // send a later one. In step at a random phase, the twin's spin could
        // sit on that instant for a whole run and take the second core from
        // an emulator thread that is not real-time.
        let (cfg, twin_probe_cfg) = match twin {
            None => (cfg.clone(), None),
            Some(t) => {
                let start = probe::tai_now_ns() + 2 * cfg.expected_delay_ns + 200_000_000;
                let half_gap_ns = (0.5e9 / cfg.rate_pps) as u64;
                let own = ProbeConfig {
                    start_tai_ns: Some(start),
                    ..cfg.clone()
                };
                let twin = ProbeConfig {
                    start_tai_ns: Some(start + half_gap_ns),
                    ..twin_cfg(t, cfg)
                };
                (own, Some(twin))
            }
        };
        let cfg = &cfg;
        let (run, died, beside) = std::thread::scope(|s| {
            let watcher = s.spawn(|| running.watch(&finished, &stop, &self.interrupted));
            let twin_probe = twin_probe_cfg
                .as_ref()
                .map(|c| s.spawn(|| probe::run_until(c, &stop)));
            let floor = twin.map(|_| {
                s.spawn(|| {
                    let mut jitter = Jitter::new();
                    timer_floor_while(|| !finished.load(Ordering::Acquire), || jitter.next())
                })
            });
            let run = probe::run_until(cfg, &stop);
            finished.store(true, Ordering::Release);
            let beside = match (twin_probe, floor) {
                (Some(t), Some(f)) => Some((
                    t.join().expect("twin probe thread"),
                    f.join().expect("timer floor thread"),
                )),
                _ => None,
            };
            (run, watcher.join().expect("watcher thread"), beside)
        });
        if let Some(reason) = died {
            bail!("{reason}");
        }
        let counts = running.stop()?;
        if self.interrupted.load(Ordering::Relaxed) {
            // Returning unwinds to `run`, whose Topology removes the namespaces.
            bail!("interrupted");
        }
        let beside = match beside {
            Some((bridge, floor)) => Some(Beside {
                bridge: bridge
                    .context("the Linux bridge between the twin hosts")?
                    .analysis,
                timer_floor_ns: floor,
            }),
            None => None,
        };
        Ok((run?, counts, beside))
    }
}

/// `cfg` sent between `topo`'s hosts instead, expecting no delay: the
/// twin's probe through the Linux bridge.
pub(super) fn twin_cfg(topo: &Topology, cfg: &ProbeConfig) -> ProbeConfig {
    ProbeConfig {
        dst: std::net::SocketAddrV4::new(topo.addr_b, PORT),
        src_ns: Some(topo.ns_a.clone()),
        dst_ns: Some(topo.ns_b.clone()),
        expected_delay_ns: 0,
        drain_ns: 300_000_000,
        start_tai_ns: None,
        ..cfg.clone()
    }
}

/// The commands that repeat a measurement of `dut` between `topo`'s hosts by hand.
pub(super) fn repeat_on(topo: &Topology, backend: &str, dut: &Dut, cfg: &ProbeConfig) -> String {
    let probe = format!(
        "linkem probe {} --port {} --src-ns {} --dst-ns {} --rate {:.0}pps --size {} --pattern {} --packets {} --expect-delay {}",
        cfg.dst.ip(),
        cfg.dst.port(),
        topo.ns_a,
        topo.ns_b,
        cfg.rate_pps,
        cfg.size_bytes,
        cfg.pattern,
        cfg.packets,
        linkem_core::units::format_time_ns(cfg.expected_delay_ns),
    );
    match dut {
        Dut::Linkem(_) | Dut::LinkemWith { .. } => format!(
            "linkem bridge {} {} {} & {probe}",
            topo.emu_a,
            topo.emu_b,
            dut.bridge_args(backend).join(" ")
        ),
        Dut::LinuxBridge => format!(
            "ip link add BR type bridge; ip link set {} master BR; ip link set {} master BR; ip link set BR up; {probe}",
            topo.emu_a, topo.emu_b
        ),
    }
}

/// The timer floor beside a measurement: deadlines 0.75-1.25 ms apart at
/// random (a fixed seed), so that they drift across a constant 1 kpps
/// stream's releases instead of meeting them at one phase for a whole run.
struct Jitter(u64);

impl Jitter {
    fn new() -> Jitter {
        Jitter(0x9e37_79b9_7f4a_7c15)
    }

    fn next(&mut self) -> std::time::Duration {
        // xorshift64: any spread will do, it only breaks the phase.
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        std::time::Duration::from_nanos(750_000 + self.0 % 500_001)
    }
}

/// How late a SCHED_FIFO thread wakes from sleeps to deadlines `period`
/// apart, for `secs`: what any emulator that releases packets at their time
/// pays on this machine, whatever its design. A packet held for `delay 10ms`
/// is exposed to every stall of the machine during those 10 ms, while the
/// Linux bridge holds a packet for microseconds: so the tail beyond the
/// bridge can be no better than this floor.
pub(super) fn timer_floor(secs: f64, period: std::time::Duration) -> Percentiles {
    let start = std::time::Instant::now();
    timer_floor_while(|| start.elapsed().as_secs_f64() < secs, || period)
}

/// [`timer_floor`] while `go` holds, each deadline `period()` after the last.
fn timer_floor_while(
    go: impl Fn() -> bool + Send,
    mut period: impl FnMut() -> std::time::Duration + Send,
) -> Percentiles {
    // A thread of its own: the real-time policy is not the caller's to change.
    let mut late = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("linkem-bench-timer".into())
            .spawn_scoped(s, move || {
                // Without CAP_SYS_NICE the thread measures at normal priority.
                let _ = linkem_runtime::pipeline::set_realtime(50);
                let mut late = Vec::with_capacity(16_384);
                let mut next = std::time::Instant::now() + period();
                while go() {
                    let now = std::time::Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    }
                    let woke = std::time::Instant::now();
                    late.push(woke.saturating_duration_since(next).as_nanos() as i64);
                    // Deadlines missed by a long stall are skipped, not caught up.
                    let mut step = period();
                    next += step;
                    while next + step < woke {
                        step = period();
                        next += step;
                    }
                }
                late
            })
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default()
    });
    probe::stats::percentiles(&mut late)
}

pub(super) fn pps_text(pps: f64) -> String {
    if pps >= 1000.0 {
        format!("{:.1} kpps", pps / 1000.0)
    } else {
        format!("{pps:.0} pps")
    }
}

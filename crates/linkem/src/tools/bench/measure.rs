//! One measurement: a device under test started, `linkem probe` run through
//! it, and the row it gives; what the scenarios and the report share.

use super::dut::{Dut, Running};
use crate::cli::bench::BenchArgs;
use crate::tools::probe::{self, stats::Analysis, stats::Percentiles, Pattern, ProbeConfig};
use anyhow::{bail, Result};
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
        }
    }

    pub(super) fn repeat(&self, dut: &Dut, cfg: &ProbeConfig) -> String {
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
            Dut::Linkem(_) | Dut::LinkemWith { .. } => format!(
                "linkem bridge {} {} {} & {probe}",
                self.topo.emu_a,
                self.topo.emu_b,
                dut.bridge_args(&self.args.backend).join(" ")
            ),
            Dut::LinuxBridge => format!(
                "ip link add BR type bridge; ip link set {} master BR; ip link set {} master BR; ip link set BR up; {probe}",
                self.topo.emu_a, self.topo.emu_b
            ),
        }
    }

    pub(super) fn measure(
        &self,
        dut: &Dut,
        cfg: &ProbeConfig,
    ) -> Result<(probe::ProbeRun, Option<serde_json::Value>)> {
        if self.interrupted.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        let mut running = Running::start(self.topo, dut, &self.args.backend)?;
        // A failure on either side ends the other: the probe stops if linkem exits,
        // and linkem is stopped (below) whatever became of the probe.
        let stop = AtomicBool::new(false);
        let finished = AtomicBool::new(false);
        let (run, died) = std::thread::scope(|s| {
            let watcher = s.spawn(|| running.watch(&finished, &stop, &self.interrupted));
            let run = probe::run_until(cfg, &stop);
            finished.store(true, Ordering::Release);
            (run, watcher.join().expect("watcher thread"))
        });
        if let Some(reason) = died {
            bail!("{reason}");
        }
        let counts = running.stop()?;
        if self.interrupted.load(Ordering::Relaxed) {
            // Returning unwinds to `run`, whose Topology removes the namespaces.
            bail!("interrupted");
        }
        Ok((run?, counts))
    }
}

pub(super) fn pps_text(pps: f64) -> String {
    if pps >= 1000.0 {
        format!("{:.1} kpps", pps / 1000.0)
    } else {
        format!("{pps:.0} pps")
    }
}

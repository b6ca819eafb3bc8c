//! The device under test: linkem as a child process, or the Linux bridge.
//! [`EXTRA_ARGS_VAR`] adds bridge options to every linkem the bench starts
//! (e.g. `--web 127.0.0.1:18479`, to measure the cost of a page left open).

use anyhow::{bail, Context, Result};
use linkem_io::netns::{self, Topology};
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The environment variable whose words (split at whitespace) every
/// `linkem bridge` of the bench gets after its interfaces.
pub const EXTRA_ARGS_VAR: &str = "LINKEM_BENCH_ARGS";

/// The bridge options of [`EXTRA_ARGS_VAR`], none when it is unset.
pub(super) fn extra_args() -> Vec<String> {
    std::env::var(EXTRA_ARGS_VAR)
        .map(|v| v.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// The device under test.
#[derive(Debug, Clone)]
pub(super) enum Dut {
    /// linkem with these link words, on the bench's `--backend`.
    Linkem(Vec<String>),
    /// linkem with bridge options of its own (a backend, a real-time policy)
    /// before the link words; `options` empty is linkem as users start it.
    LinkemWith {
        options: Vec<String>,
        words: Vec<String>,
    },
    LinuxBridge,
}

impl Dut {
    pub(super) fn name(&self) -> String {
        match self {
            Dut::Linkem(w) if w.is_empty() => "linkem (no impairment)".into(),
            Dut::Linkem(w) => format!("linkem {}", w.join(" ")),
            Dut::LinkemWith { options, .. } if options.is_empty() => "linkem (defaults)".into(),
            Dut::LinkemWith { options, .. } => format!("linkem {}", options.join(" ")),
            Dut::LinuxBridge => "Linux bridge".into(),
        }
    }

    /// The link words linkem runs with (empty for the Linux bridge).
    pub(super) fn words(&self) -> &[String] {
        match self {
            Dut::Linkem(w) | Dut::LinkemWith { words: w, .. } => w,
            Dut::LinuxBridge => &[],
        }
    }

    /// `linkem bridge` options and words after the interfaces, given the
    /// bench's backend ([`EXTRA_ARGS_VAR`]'s options first).
    pub(super) fn bridge_args(&self, backend: &str) -> Vec<String> {
        let own: Vec<String> = match self {
            Dut::Linkem(w) => ["--backend", backend]
                .iter()
                .map(|s| s.to_string())
                .chain(w.iter().cloned())
                .collect(),
            Dut::LinkemWith { options, words } => {
                options.iter().chain(words.iter()).cloned().collect()
            }
            Dut::LinuxBridge => return Vec::new(),
        };
        extra_args().into_iter().chain(own).collect()
    }
}

/// A running device under test.
pub(super) struct Running {
    child: Option<Child>,
    bridge: Option<String>,
}

impl Running {
    pub(super) fn start(topo: &Topology, dut: &Dut, backend: &str) -> Result<Running> {
        match dut {
            Dut::Linkem(_) | Dut::LinkemWith { .. } => {
                let args = dut.bridge_args(backend);
                let exe = std::env::current_exe().context("the linkem executable")?;
                let mut child = Command::new(exe)
                    .args(["bridge", &topo.emu_a, &topo.emu_b, "--stats", "json"])
                    .args(&args)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .context("cannot start linkem bridge")?;
                // Measured from when it forwards: a loaded machine starts it in
                // more than any fixed sleep, and the first packets of a sparse
                // stream would be lost before it, on no link's account.
                let socket = linkem_ctl::bridge_socket_path(&args, &topo.emu_a, &topo.emu_b);
                let serving = match &socket {
                    Some(path) => linkem_ctl::Client::connect_when_serving(
                        path,
                        Duration::from_secs(30),
                        || matches!(child.try_wait(), Ok(None)),
                    )
                    .map(drop),
                    // No socket to ask: the time it takes to start on an idle machine, twice over.
                    None => {
                        std::thread::sleep(Duration::from_millis(500));
                        Ok(())
                    }
                };
                if let Some(status) = child.try_wait()? {
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        let _ = e.read_to_string(&mut err);
                    }
                    bail!("linkem bridge {} exited ({status}): {err}", args.join(" "));
                }
                if let Err(e) = serving {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!("linkem bridge {} did not start: {e}", args.join(" "));
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

    /// Watches the device while a probe runs: if linkem exits, or the bench is
    /// interrupted, sets `stop` (ending the probe at once) and returns why. Returns None
    /// once `finished` is set.
    pub(super) fn watch(
        &mut self,
        finished: &AtomicBool,
        stop: &AtomicBool,
        interrupted: &AtomicBool,
    ) -> Option<String> {
        while !finished.load(Ordering::Acquire) {
            if interrupted.load(Ordering::Relaxed) {
                stop.store(true, Ordering::Release);
                return Some("interrupted".into());
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    stop.store(true, Ordering::Release);
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        let _ = e.read_to_string(&mut err);
                    }
                    self.child = None;
                    return Some(format!(
                        "linkem bridge exited during the probe ({status}): {}",
                        err.trim_end()
                    ));
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Stops the device; for linkem, returns its final counts (JSON).
    pub(super) fn stop(mut self) -> Result<Option<serde_json::Value>> {
        self.halt()
    }

    fn halt(&mut self) -> Result<Option<serde_json::Value>> {
        if let Some(br) = self.bridge.take() {
            let _ = netns::ip(&["link", "del", &br]);
        }
        let Some(mut child) = self.child.take() else {
            return Ok(None);
        };
        let _ = linkem_io::sys::signal_child(&child, libc::SIGINT);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_that_exits_stops_the_probe_with_its_reason() {
        let child = Command::new("sh")
            .args(["-c", "echo 'bridge failed: no such interface' >&2; exit 3"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut running = Running {
            child: Some(child),
            bridge: None,
        };
        let (finished, stop, interrupted) = (
            AtomicBool::new(false),
            AtomicBool::new(false),
            AtomicBool::new(false),
        );
        let t = Instant::now();
        let why = running.watch(&finished, &stop, &interrupted).unwrap();
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(stop.load(Ordering::Acquire), "the probe is told to stop");
        assert!(
            why.contains("exit status: 3") && why.contains("no such interface"),
            "{why}"
        );
        // A probe that finished first: the watcher returns nothing.
        finished.store(true, Ordering::Release);
        assert!(running.watch(&finished, &stop, &interrupted).is_none());
    }
}

//! `linkem host` fails open when it stops answering, not only when it dies
//! (issue 34, item 9). The queue rules' `--queue-bypass` lets packets pass
//! once no process has the queue bound, which covers a linkem that exits or
//! is killed; a linkem that is stopped (SIGSTOP, Ctrl-Z, a debugger, a frozen
//! cgroup) or stalls keeps its queues bound, and every packet the chains take
//! waits for a verdict that does not come: ssh and loopback included.
//!
//! # The watchdog
//! A small process of its own (`linkem host-watchdog`, hidden), started once
//! the chains are installed, in a process group of its own (Ctrl-C and Ctrl-Z
//! at a terminal reach linkem, not it). linkem writes one byte to its stdin
//! every `T / 4` (`T` = `--fail-open-after`, default [`DEFAULT_STALL_MS`])
//! from a thread of its own, which stops with the process. Then:
//! - no byte for `T`: the watchdog deletes the jumps from `INPUT` and `OUTPUT`
//!   to linkem's chains, in iptables and ip6tables, and says so on stderr:
//!   new packets pass unimpaired about `T` + the time of four `iptables`
//!   runs after the stall began. Packets already queued stay with the stopped
//!   linkem (their verdicts come when it answers again, or the kernel drops
//!   them when it dies);
//! - bytes again after that (SIGCONT): linkem answers again, the watchdog
//!   puts the jumps back (first in `INPUT`/`OUTPUT`, as at the start) and
//!   says so: emulation resumes. Packets held during the stall get their
//!   verdicts late (past `--max-lag`: dropped as late);
//! - end of file (linkem exited, cleanly or killed): the watchdog exits and
//!   changes nothing: a clean exit removes the chains itself (after the
//!   watchdog has exited), a killed one leaves them to `--queue-bypass` and
//!   the next start.
//!
//! The heartbeat shows that the process runs, not that its data path
//! progresses: a stage stuck inside a running linkem is not detected.

use crate::host::iptables::{ipt, CHAIN_IN, CHAIN_OUT, TABLES};
use anyhow::{anyhow, bail, Context, Result};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `--fail-open-after` by default, in ms.
pub const DEFAULT_STALL_MS: u64 = 1000;
/// The shortest `--fail-open-after`: below it a busy machine's scheduling
/// delays alone would fail open.
pub const MIN_STALL_MS: u64 = 50;

/// Reads `--fail-open-after`: a time (`500ms`, `2s`) or `off`.
pub fn parse_stall(text: &str) -> Result<Option<Duration>> {
    if text == "off" {
        return Ok(None);
    }
    let ns = linkem_core::units::parse_time_ns(text)
        .map_err(|e| anyhow!("--fail-open-after {e} (or 'off')"))?;
    if ns < MIN_STALL_MS * 1_000_000 {
        bail!("--fail-open-after {text}: at least {MIN_STALL_MS}ms (or 'off')");
    }
    Ok(Some(Duration::from_nanos(ns)))
}

/// The hidden `linkem host-watchdog` command (started by `linkem host`).
#[derive(clap::Args, Debug, Clone)]
pub struct WatchdogArgs {
    /// Fail open after this many ms without a heartbeat on stdin.
    #[arg(long)]
    pub stall_ms: u64,
}

/// The watchdog seen from linkem: the process and the heartbeat thread.
pub struct Watchdog {
    child: Child,
    stop: Arc<AtomicBool>,
    beat: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts the watchdog process and the heartbeat.
    pub fn start(stall: Duration) -> Result<Watchdog> {
        let exe = std::env::current_exe().context("the watchdog runs linkem's own binary")?;
        let stall_ms = stall.as_millis().to_string();
        let mut child = Command::new(exe)
            .args(["host-watchdog", "--stall-ms", &stall_ms])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .context("cannot start linkem's host watchdog")?;
        let stdin = child.stdin.take().context("the watchdog's stdin")?;
        let stop = Arc::new(AtomicBool::new(false));
        let beat = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("host-heartbeat".into())
                .spawn(move || heartbeat(stdin, stall / 4, &stop))
                .context("cannot start the heartbeat thread")?
        };
        Ok(Watchdog {
            child,
            stop,
            beat: Some(beat),
        })
    }
}

fn heartbeat(mut to: ChildStdin, every: Duration, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        if to.write_all(b".").is_err() {
            return; // the watchdog is gone; nothing to tell
        }
        std::thread::park_timeout(every);
    }
    // `to` drops here: end of file, and the watchdog exits.
}

impl Drop for Watchdog {
    /// Ends the watchdog and waits for it, so that it changes no rule after
    /// this (the chains are removed next).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.beat.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The jumps to linkem's chains, as `iptables` arguments after `-D`/`-I`.
const JUMPS: [(&str, &str); 2] = [("INPUT", CHAIN_IN), ("OUTPUT", CHAIN_OUT)];

/// Deletes every jump to linkem's chains; an error when iptables could not
/// be run or a jump is still there afterwards.
fn remove_jumps() -> Result<()> {
    for tool in TABLES {
        for (hook, chain) in JUMPS {
            while ipt(tool, &["-D", hook, "-j", chain])? {}
            if ipt(tool, &["-C", hook, "-j", chain])? {
                bail!("{tool}: the jump from {hook} to {chain} is still there");
            }
        }
    }
    Ok(())
}

fn restore_jumps() -> Result<()> {
    for tool in TABLES {
        for (hook, chain) in JUMPS {
            // Only where the chain still exists (linkem may be removing it).
            if ipt(tool, &["-C", hook, "-j", chain])? {
                continue;
            }
            if ipt(tool, &["-n", "-L", chain])? {
                ipt(tool, &["-I", hook, "1", "-j", chain])?;
            }
        }
    }
    Ok(())
}

/// Runs the watchdog until its stdin ends.
pub fn run(args: &WatchdogArgs) -> Result<()> {
    // Started from a binary with file capabilities, the watchdog has them
    // again after exec, but the iptables it runs need them passed on.
    if let Err(e) = crate::host::iptables::pass_to_iptables() {
        // Root's iptables needs nothing passed; otherwise failing open fails
        // and says so when it comes to it.
        eprintln!("linkem: host watchdog: {e}");
    }
    let stall = Duration::from_millis(args.stall_ms.max(MIN_STALL_MS));
    // A reader thread turns the blocking heartbeat pipe into messages that
    // the main loop waits for with a timeout: Some(true) a beat, Some(false)
    // the end of file.
    let (tx, rx) = std::sync::mpsc::channel::<bool>();
    std::thread::Builder::new()
        .name("heartbeat-reader".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = [0u8; 256];
            loop {
                let beat = match stdin.read(&mut buf) {
                    Ok(0) => false,
                    Ok(_) => true,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => false,
                };
                if tx.send(beat).is_err() || !beat {
                    return;
                }
            }
        })
        .context("cannot start the heartbeat reader")?;
    let mut failed_open_at: Option<Instant> = None;
    let mut last_beat = Instant::now();
    loop {
        let got = match failed_open_at {
            Some(_) => rx.recv().ok(),
            None => match rx.recv_timeout(stall.saturating_sub(last_beat.elapsed())) {
                Ok(b) => Some(b),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    match remove_jumps() {
                        Ok(()) => eprintln!(
                            "linkem: host watchdog: no heartbeat from linkem for {} ms \
                             (stopped or stalled): removed the jumps to {CHAIN_IN}/{CHAIN_OUT}, \
                             traffic passes unimpaired until linkem answers again",
                            stall.as_millis()
                        ),
                        Err(e) => eprintln!(
                            "linkem: host watchdog: no heartbeat from linkem for {} ms, and \
                             removing the jumps to its chains failed: {e}",
                            stall.as_millis()
                        ),
                    }
                    failed_open_at = Some(Instant::now());
                    continue;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => None,
            },
        };
        match got {
            // linkem exited (or the pipe broke): nothing more to watch.
            None | Some(false) => return Ok(()),
            Some(true) => {
                last_beat = Instant::now();
                if let Some(at) = failed_open_at.take() {
                    match restore_jumps() {
                        Ok(()) => eprintln!(
                            "linkem: host watchdog: linkem answers again after {:.1} s \
                             failed open: its chains are jumped to again",
                            at.elapsed().as_secs_f64()
                        ),
                        Err(e) => eprintln!("linkem: host watchdog: restoring the jumps: {e}"),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_open_after_takes_a_time_or_off_and_refuses_too_short() {
        assert_eq!(parse_stall("off").unwrap(), None);
        assert_eq!(
            parse_stall("250ms").unwrap(),
            Some(Duration::from_millis(250))
        );
        let e = parse_stall("10ms").unwrap_err().to_string();
        assert!(e.contains("at least 50ms"), "{e}");
        assert!(parse_stall("soon").is_err());
    }
}

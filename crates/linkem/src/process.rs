//! What a run takes from its process rather than its arguments: the signals
//! that end or reload it (a replay's `SignalGuard`, the bridge's
//! `signal_flags`) and a fresh seed when none was given.

use anyhow::{bail, Context, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A seed for runs that did not give one: different per run, printed so the run
/// can be repeated.
pub fn fresh_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    // Keep seeds short enough to type.
    (t ^ (std::process::id() as u64).rotate_left(32)) % 1_000_000_000
}

/// SIGINT and SIGTERM during a replay: the first sets a flag the packet loop checks, so
/// the run ends through the ordinary error path, which deletes the temporary output
/// (`linkem_io::outfile`); a second one terminates at once (for a replay stuck reading
/// a pipe). The handlers are installed once per process and stay: signal-hook cannot
/// give back the default action once removed, and a removed SIGINT handler would leave
/// in-process callers (benches) unable to be interrupted at all.
pub(crate) struct SignalGuard {
    flags: &'static [(i32, Arc<AtomicBool>); 2],
}

type SignalFlags = [(i32, Arc<AtomicBool>); 2];

static SIGNALS: std::sync::OnceLock<Result<SignalFlags, String>> = std::sync::OnceLock::new();

impl SignalGuard {
    pub(crate) fn install() -> Result<SignalGuard> {
        let installed = SIGNALS.get_or_init(|| {
            use signal_hook::consts::{SIGINT, SIGTERM};
            let flags = [
                (SIGINT, Arc::new(AtomicBool::new(false))),
                (SIGTERM, Arc::new(AtomicBool::new(false))),
            ];
            for (sig, flag) in &flags {
                // Order matters: the conditional default must see the flag before it is set.
                signal_hook::flag::register_conditional_default(*sig, flag.clone())
                    .and_then(|_| signal_hook::flag::register(*sig, flag.clone()))
                    .map_err(|e| e.to_string())?;
            }
            Ok(flags)
        });
        match installed {
            Ok(flags) => Ok(SignalGuard { flags }),
            Err(e) => bail!("cannot install the signal handler: {e}"),
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        for (sig, flag) in self.flags {
            if flag.load(Ordering::Relaxed) {
                return Err(crate::Interrupted { signal: *sig }.into());
            }
        }
        Ok(())
    }
}

/// Flags set by SIGINT/SIGTERM (stop, with final counts) and by SIGHUP (read
/// the configuration again), for the bridge's main loop to poll.
pub(crate) fn signal_flags() -> Result<(Arc<AtomicBool>, Arc<AtomicBool>)> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .context("cannot install the signal handler")?;
    }
    let reload = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, reload.clone())
        .context("cannot install the signal handler")?;
    Ok((stop, reload))
}

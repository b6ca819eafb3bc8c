//! The iptables side of `linkem host`: the names of linkem's two chains and
//! the one way linkem runs `iptables`/`ip6tables` (with `-w 5`, so a busy
//! xtables lock waits rather than fails). `ports` installs and removes
//! the chains with it, and `watchdog` removes and restores their jumps:
//! both import this module and neither imports the other's internals.

use anyhow::{anyhow, bail, Context, Result};
use linkem_io::caps::{self, Cap};
use std::process::{Command, Output};

/// Chain for what this host receives (side a).
pub const CHAIN_IN: &str = "LINKEM-HOST-IN";
/// Chain for what this host sends (side b).
pub const CHAIN_OUT: &str = "LINKEM-HOST-OUT";

/// Makes CAP_NET_ADMIN ambient in the calling thread, so that the
/// `iptables` it and the threads it starts later run have it.
pub fn pass_to_iptables() -> Result<()> {
    caps::pass_to_programs(&[Cap::NET_ADMIN])
        .map_err(|e| anyhow!("cannot pass CAP_NET_ADMIN on to iptables: {e}"))
}

/// The two tools linkem's chains are made with, IPv4's and IPv6's.
pub const TABLES: [&str; 2] = ["iptables", "ip6tables"];

fn run(tool: &str, args: &[&str]) -> Result<Output> {
    Command::new(tool)
        .args(["-w", "5"])
        .args(args)
        .output()
        .with_context(|| format!("cannot run {tool} (linkem host needs iptables)"))
}

/// Runs `tool ARGS`; whether it succeeded (`-D`/`-C` of a missing rule
/// fail, which callers ask about). An error only if it could not run.
pub fn ipt(tool: &str, args: &[&str]) -> Result<bool> {
    Ok(run(tool, args)?.status.success())
}

/// Runs `tool ARGS`; its failure is an error with its own words.
pub fn ipt_checked(tool: &str, args: &[&str]) -> Result<()> {
    let out = run(tool, args)?;
    if !out.status.success() {
        bail!(
            "{tool} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

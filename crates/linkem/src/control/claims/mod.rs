//! Port claims (seed 004 §6.1, §6.2): a local user takes a UDP or TCP port
//! (or range) as its own and gets one pipe per direction for it, as
//! PlanetLab's `netconfig` did; nobody else may configure that port until
//! the claim is released or expires. This module is the bookkeeping, with
//! no I/O: who holds what ([`Table`]), the per-user limits root sets
//! ([`Limits`], `--limits FILE`), the options ([`ClaimArgs`], shared by
//! every front end that runs rules). [`super::rules::Rules`] turns a claim
//! into typed `Change`s on the running node.
//!
//! # Numbers
//! Claim slot `i` (0 ≤ i < [`MAX_CLAIMS`]) owns pipes and rules
//! `CLAIM_FIRST + 2i` (side a, `a-to-b`, ipfw `in`: what a host receives)
//! and `CLAIM_FIRST + 2i + 1` (side b, `b-to-a`, `out`: what it sends), so
//! numbers [`CLAIM_FIRST`]..=[`CLAIM_LAST`] are the claims' alone: with
//! claims on, a rule file or a request that names one is refused. The rule
//! of side a selects the claim's ports as destination
//! (`add N pipe N PROTO from any to any dst-port P in`), the rule of side b
//! as source (`add N+1 pipe N+1 PROTO from any src-port P to any out`): a
//! server on port P is slowed both ways. They come after every rule of the
//! file numbered below [`CLAIM_FIRST`].
//!
//! # What a user may hold
//! For each user (uid; `default` for the others; root unbounded unless
//! named) [`Limit`]: `claims` (claims at once), `ports` (ports over all its
//! claims), `rate` (highest `bw` of a pipe), `delay` (highest `delay`),
//! `queue` (bytes its pipes may hold at once, summed over its claims). A
//! pipe without `bw` gets the user's `rate` limit as its `bw`, so that what
//! it holds is bounded: queue capacity (`queue N` slots × [`MAX_FRAME_BYTES`],
//! or `queue NKBytes`) + rate × (delay + 4 × jitter) / 8. Each refusal
//! names the limit, its value and what the request asked.
//!
//! # Which ports a user may claim
//! A claim slows everyone's traffic on its ports, so a user other than root
//! and the emulator's starter (who may write any rule anyway) may claim
//! only ports it could bind itself ([`check_ports`], port by port over a
//! range): a port at or above `ip_unprivileged_port_start` (the sysctl of
//! linkem's network namespace) that no socket of another uid holds (the
//! kernel's `/proc/net/{tcp,tcp6,udp,udp6}` of that namespace: any socket
//! bound to it, listening or connected; TIME_WAIT and half-open entries
//! belong to no process and do not count), unless root's `--limits` allows
//! the user that port (`allow=udp:53,tcp:8000-8100`), which overrides both
//! rules. Checked at every `claim` (a renewal too: a claim does not keep a
//! port another user has bound since), never at `release`.
//!
//! # Time
//! A claim lives `--claim-ttl` from its last `claim` (a claim again renews
//! it). Times are CLOCK_REALTIME ns, the clock of packet stamps and of a
//! change's `at_ns`; the control side looks for expired claims every
//! [`EXPIRY_TICK`] and removes their rules and pipes as one change, whose
//! instant the audit log records.

mod limits;
mod node;
#[cfg(test)]
mod node_tests;
mod ports;
mod table;
#[cfg(test)]
mod tests;

use anyhow::{anyhow, bail, Result};
use linkem_core::units::parse_time_ns;
use std::path::PathBuf;
use std::time::Duration;

pub use limits::{Limit, Limits, PortAllow};
pub use ports::{check_ports, parse_socket_table, PortHolder, PortView};
pub use table::{largest_delay_ns, numbers, ports_text, Claim, ClaimDone, PipeAsk, Table};

/// The first pipe and rule number kept for claims.
pub const CLAIM_FIRST: u32 = 40_000;
/// Claims held at once on one emulator, all users together.
pub const MAX_CLAIMS: u32 = 5_000;
/// The last number kept for claims.
pub const CLAIM_LAST: u32 = CLAIM_FIRST + 2 * MAX_CLAIMS - 1;
/// `--claim-ttl` by default (seed 004's expiry daemon had one too).
pub const DEFAULT_TTL_NS: u64 = 3_600_000_000_000;
/// How often the control side looks for expired claims.
pub const EXPIRY_TICK: Duration = Duration::from_millis(100);
/// Bytes a queue slot may hold: a jumbo frame (the bound of a `queue N`
/// counted in packets).
pub const MAX_FRAME_BYTES: u64 = 9216;

/// Whether `n` is a pipe or rule number kept for claims.
pub fn reserved(n: u32) -> bool {
    (CLAIM_FIRST..=CLAIM_LAST).contains(&n)
}

/// Refuses, naming it, the first of `numbers` (a rule set's objects by kind
/// word and its rules) kept for claims.
pub(in crate::control) fn reserved_in<'a>(
    numbers: impl IntoIterator<Item = (&'a str, u32)>,
) -> Result<(), String> {
    match numbers.into_iter().find(|(_, n)| reserved(*n)) {
        Some((k, n)) => Err(format!(
            "{k} {n}: with --claims, pipes and rules {CLAIM_FIRST}-{CLAIM_LAST} are kept for claims"
        )),
        None => Ok(()),
    }
}

/// The options that turn claims on, shared by the front ends that run rules.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClaimArgs {
    /// Let every local user claim UDP/TCP ports through the control socket
    /// ('linkem ctl claim udp PORT -- WORDS'), each claim its own pipe per
    /// direction. Opens the socket to all (mode 0666; 0660 with
    /// --control-group): what a user other than root and the starter may
    /// do there is bounded by its claims and --limits, and it may claim
    /// only ports it could bind (not below ip_unprivileged_port_start, not
    /// held by another uid's socket) unless --limits allows it more.
    #[arg(long)]
    pub claims: bool,
    /// With --claims: how long a claim lives unless claimed again (default 1h;
    /// 30min, 2h, at most 24h).
    #[arg(long, value_name = "TIME", requires = "claims", value_parser = linkem_core::units::checked_time)]
    pub claim_ttl: Option<String>,
    /// With --claims: per-user limits (root's file; see docs/guide/claims.md,
    /// "Limits"): lines 'UID|default claims=N ports=N rate=R delay=T queue=SIZE
    /// allow=PROTO:PORT[-PORT],...' (allow: ports it may claim beyond those it could bind).
    #[arg(long, value_name = "FILE", requires = "claims")]
    pub limits: Option<PathBuf>,
}

impl ClaimArgs {
    /// The claims configuration, the limits file read (None: claims off).
    pub fn build(&self) -> Result<Option<ClaimConfig>> {
        if !self.claims {
            return Ok(None);
        }
        let ttl_ns = match &self.claim_ttl {
            None => DEFAULT_TTL_NS,
            Some(t) => {
                let ns = parse_time_ns(t).map_err(|e| anyhow!("--claim-ttl {e}"))?;
                if ns < 100_000_000 {
                    bail!("--claim-ttl {t}: at least 100ms (claims expire at that resolution)");
                }
                ns
            }
        };
        let limits = match &self.limits {
            None => Limits::default(),
            Some(p) => {
                let text = linkem_io::infile::read_text(p, linkem_io::infile::MAX_TEXT_BYTES)
                    .map_err(|e| anyhow!("--limits {e}"))?;
                let name = p.display().to_string();
                Limits::parse(&text).map_err(|e| {
                    let e = linkem_core::filetext::hide_content(&e.to_string(), &name, &text);
                    anyhow!("--limits {name}: {e}")
                })?
            }
        };
        Ok(Some(ClaimConfig {
            ttl_ns,
            limits,
            port_view: PortView::read,
        }))
    }
}

/// What claims run with.
#[derive(Debug, Clone)]
pub struct ClaimConfig {
    pub ttl_ns: u64,
    pub limits: Limits,
    /// Where the ports users could bind are learnt: [`PortView::read`]
    /// (a table of one's own in unit tests).
    pub port_view: fn() -> Result<PortView, String>,
}

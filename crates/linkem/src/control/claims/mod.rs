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

use super::failure::Failure;
use anyhow::{anyhow, bail, Result};
use linkem_core::units::{
    format_rate_bps, format_time_ns, parse_rate_bps, parse_size_bytes, parse_time_ns,
};
use linkem_ctl::Proto;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

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
    /// With --claims: per-user limits (root's file; see README, "Sharing one
    /// emulator"): lines 'UID|default claims=N ports=N rate=R delay=T queue=SIZE
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

/// One user's bounds; `None`: unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub claims: Option<u64>,
    pub ports: Option<u64>,
    pub rate_bps: Option<u64>,
    pub delay_ns: Option<u64>,
    pub queue_bytes: Option<u64>,
}

impl Limit {
    pub const NONE: Limit = Limit {
        claims: None,
        ports: None,
        rate_bps: None,
        delay_ns: None,
        queue_bytes: None,
    };
    /// Without a `default` line: a few claims, a modest link, 64 MiB held.
    pub const BUILT_IN: Limit = Limit {
        claims: Some(16),
        ports: Some(256),
        rate_bps: Some(100_000_000),
        delay_ns: Some(5_000_000_000),
        queue_bytes: Some(64 << 20),
    };
}

/// Ports root's `--limits` lets a user claim beyond those it could bind:
/// `udp:53` or `tcp:8000-8100`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAllow {
    pub proto: Proto,
    pub ports: (u16, u16),
}

impl PortAllow {
    fn parse(text: &str) -> Result<PortAllow, String> {
        let bad =
            || format!("'{text}': PROTO:PORT or PROTO:PORT-PORT expected (udp:53, tcp:8000-8100)");
        let (proto, ports) = text.split_once(':').ok_or_else(bad)?;
        let proto = match proto {
            "udp" => Proto::Udp,
            "tcp" => Proto::Tcp,
            _ => return Err(bad()),
        };
        let port = |p: &str| p.parse::<u16>().ok().filter(|&p| p > 0);
        let ports = match ports.split_once('-') {
            Some((a, b)) => (port(a).ok_or_else(bad)?, port(b).ok_or_else(bad)?),
            None => {
                let p = port(ports).ok_or_else(bad)?;
                (p, p)
            }
        };
        if ports.0 > ports.1 {
            return Err(format!("'{text}': the first port is above the last"));
        }
        Ok(PortAllow { proto, ports })
    }

    fn covers(&self, proto: Proto, port: u16) -> bool {
        self.proto == proto && (self.ports.0..=self.ports.1).contains(&port)
    }
}

/// The limits of `--limits FILE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub default: Limit,
    pub by_uid: HashMap<u32, Limit>,
    /// The `allow` of the `default` line.
    pub default_allow: Vec<PortAllow>,
    /// The `allow` of the users' lines that give one.
    pub allow_by_uid: HashMap<u32, Vec<PortAllow>>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            default: Limit::BUILT_IN,
            by_uid: HashMap::new(),
            default_allow: Vec::new(),
            allow_by_uid: HashMap::new(),
        }
    }
}

impl Limits {
    /// Reads the file: one line per user, `UID|default KEY=VALUE...`, `#`
    /// comments; keys `claims`, `ports` (counts), `rate` (`10Mbit/s`),
    /// `delay` (`500ms`), `queue` (`4MiB`), each `none` for no bound;
    /// `allow` (`udp:53,tcp:8000-8100`, `none`; repeatable, the lists
    /// add up): ports the user may claim beyond those it could bind. A
    /// user's line takes the `default` line's value (else the built-in one)
    /// for a key it does not give; root is unbounded unless named.
    pub fn parse(text: &str) -> Result<Limits, String> {
        let mut default_line: Option<Words> = None;
        let mut lines: Vec<(u32, Words)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let line = raw.split('#').next().unwrap_or("");
            let mut words = line.split_whitespace();
            let Some(who) = words.next() else { continue };
            let rest: Words = words.map(|w| (line_no, w)).collect();
            if !seen.insert(who.to_string()) {
                return Err(format!("line {line_no}: '{who}' has a line already"));
            }
            if who == "default" {
                default_line = Some(rest);
            } else {
                let uid = who.parse::<u32>().map_err(|_| {
                    format!(
                        "line {line_no}: '{who}': a line starts with a uid (a number) or 'default'"
                    )
                })?;
                lines.push((uid, rest));
            }
        }
        let mut default = Limit::BUILT_IN;
        let mut default_allow = Vec::new();
        if let Some(words) = default_line {
            if let Some(a) = apply_words(&mut default, &words)? {
                default_allow = a;
            }
        }
        let mut by_uid = HashMap::new();
        let mut allow_by_uid = HashMap::new();
        for (uid, words) in lines {
            let mut l = default;
            if let Some(a) = apply_words(&mut l, &words)? {
                allow_by_uid.insert(uid, a);
            }
            by_uid.insert(uid, l);
        }
        Ok(Limits {
            default,
            by_uid,
            default_allow,
            allow_by_uid,
        })
    }

    /// The bounds of `uid`.
    pub fn of(&self, uid: u32) -> Limit {
        match self.by_uid.get(&uid) {
            Some(l) => *l,
            None if uid == 0 => Limit::NONE,
            None => self.default,
        }
    }

    /// The ports root lets `uid` claim beyond those it could bind.
    pub fn allowed(&self, uid: u32) -> &[PortAllow] {
        self.allow_by_uid.get(&uid).unwrap_or(&self.default_allow)
    }
}

/// The words of a limits line, each with its line number.
type Words<'a> = Vec<(usize, &'a str)>;

/// Applies a line's words to `l`; the line's `allow` list, if it gives one.
fn apply_words(l: &mut Limit, words: &[(usize, &str)]) -> Result<Option<Vec<PortAllow>>, String> {
    let mut allow: Option<Vec<PortAllow>> = None;
    for &(line, w) in words {
        let at = |m: String| format!("line {line}: '{w}': {m}");
        let (key, value) = w.split_once('=').ok_or_else(|| {
            at("KEY=VALUE expected (claims, ports, rate, delay, queue, allow)".into())
        })?;
        let none = value == "none";
        let count = || {
            value
                .parse::<u64>()
                .map_err(|_| at("a count (or none)".into()))
        };
        match key {
            "claims" => l.claims = if none { None } else { Some(count()?) },
            "ports" => l.ports = if none { None } else { Some(count()?) },
            "rate" => {
                l.rate_bps = if none {
                    None
                } else {
                    Some(parse_rate_bps(value).map_err(|e| at(e.to_string()))?)
                }
            }
            "delay" => {
                l.delay_ns = if none {
                    None
                } else {
                    Some(parse_time_ns(value).map_err(|e| at(e.to_string()))?)
                }
            }
            "queue" => {
                l.queue_bytes = if none {
                    None
                } else {
                    Some(parse_size_bytes(value).map_err(|e| at(e.to_string()))?)
                }
            }
            "allow" => {
                let list = allow.get_or_insert_with(Vec::new);
                if !none {
                    for item in value.split(',') {
                        list.push(PortAllow::parse(item).map_err(at)?);
                    }
                }
            }
            _ => {
                return Err(at(format!(
                    "unknown limit '{key}' (claims, ports, rate, delay, queue, allow)"
                )))
            }
        }
    }
    Ok(allow)
}

/// One socket of the kernel's tables, as [`check_ports`] needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortHolder {
    pub port: u16,
    pub uid: u32,
}

/// What the kernel says about who may bind what, in linkem's namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortView {
    /// `net.ipv4.ip_unprivileged_port_start` (it covers IPv6 too).
    pub unprivileged_start: u32,
    /// The sockets of `/proc/net/tcp` and `tcp6`.
    pub tcp: Vec<PortHolder>,
    /// The sockets of `/proc/net/udp` and `udp6`.
    pub udp: Vec<PortHolder>,
}

/// Bytes of one kernel table read at most: about 150 bytes a socket, so
/// some 400 000 sockets; a longer table is an error, not a partial view.
const MAX_TABLE_BYTES: u64 = 64 << 20;

impl PortView {
    /// Reads the sysctl and the four socket tables of this process's
    /// network namespace (a table that does not exist, e.g. IPv6 off, is
    /// empty).
    pub fn read() -> Result<PortView, String> {
        let read = |path: &str| -> Result<Option<String>, String> {
            use std::io::Read;
            let f = match std::fs::File::open(path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(format!("{path}: {e}")),
            };
            let mut text = String::new();
            f.take(MAX_TABLE_BYTES + 1)
                .read_to_string(&mut text)
                .map_err(|e| format!("{path}: {e}"))?;
            if text.len() as u64 > MAX_TABLE_BYTES {
                return Err(format!("{path}: longer than {MAX_TABLE_BYTES} bytes"));
            }
            Ok(Some(text))
        };
        let sysctl = "/proc/sys/net/ipv4/ip_unprivileged_port_start";
        let unprivileged_start = match read(sysctl)? {
            Some(t) => t
                .trim()
                .parse::<u32>()
                .map_err(|_| format!("{sysctl}: not a number"))?,
            // Kernels before 4.11 had no sysctl: 1024 was fixed.
            None => 1024,
        };
        let table = |paths: [&str; 2]| -> Result<Vec<PortHolder>, String> {
            let mut all = Vec::new();
            for path in paths {
                if let Some(text) = read(path)? {
                    all.extend(parse_socket_table(&text).map_err(|e| format!("{path}: {e}"))?);
                }
            }
            Ok(all)
        };
        Ok(PortView {
            unprivileged_start,
            tcp: table(["/proc/net/tcp", "/proc/net/tcp6"])?,
            udp: table(["/proc/net/udp", "/proc/net/udp6"])?,
        })
    }
}

/// The sockets of a `/proc/net/{tcp,udp}[6]` table: after the header, per
/// line `sl local_address rem_address st ... uid timeout inode ...`, the
/// local address `HEXIP:HEXPORT`. Entries without an inode (TIME_WAIT,
/// half-open connections) belong to no process and are left out.
pub fn parse_socket_table(text: &str) -> Result<Vec<PortHolder>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        let bad = || format!("line {}: not a socket table line", i + 1);
        if f.len() < 10 {
            return Err(bad());
        }
        let port = f[1]
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
            .ok_or_else(bad)?;
        let uid = f[7].parse::<u32>().map_err(|_| bad())?;
        let inode = f[9].parse::<u64>().map_err(|_| bad())?;
        if inode != 0 && port != 0 {
            out.push(PortHolder { port, uid });
        }
    }
    Ok(out)
}

/// Whether `uid` (not root, not the starter) may claim `proto ports`
/// under the rules of the module doc, port by port; the refusal names the
/// first port refused and the rule that refused it.
pub fn check_ports(
    uid: u32,
    proto: Proto,
    ports: (u16, u16),
    view: &PortView,
    allowed: &[PortAllow],
) -> Result<(), Failure> {
    let held = match proto {
        Proto::Tcp => &view.tcp,
        Proto::Udp => &view.udp,
    };
    // The first other uid holding each port of the range.
    let mut others: BTreeMap<u16, u32> = BTreeMap::new();
    for h in held {
        if h.uid != uid && (ports.0..=ports.1).contains(&h.port) {
            others.entry(h.port).or_insert(h.uid);
        }
    }
    let p = proto.word();
    let refuse = |why: String| {
        Err(Failure::Refused(format!(
            "{}: {why}; uid {uid} may claim only ports it could bind, or those root's --limits \
             allows it (allow={p}:PORT)",
            ports_text(proto, ports)
        )))
    };
    for port in ports.0..=ports.1 {
        if allowed.iter().any(|a| a.covers(proto, port)) {
            continue;
        }
        if u32::from(port) < view.unprivileged_start {
            return refuse(format!(
                "{p} port {port} is below ip_unprivileged_port_start ({})",
                view.unprivileged_start
            ));
        }
        if let Some(owner) = others.get(&port) {
            return refuse(format!(
                "{p} port {port} is held by a socket of uid {owner}"
            ));
        }
    }
    Ok(())
}

/// What one pipe of a claim asks, for the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipeAsk {
    pub rate_bps: Option<u64>,
    /// The largest delay a packet can get ([`largest_delay_ns`]): what the
    /// `delay` limit bounds.
    pub delay_ns: u64,
    /// Its parts: delay, the jitter's reach, the longest wait for slots.
    pub delay_parts_ns: [u64; 3],
    /// The most it may hold: queue capacity + rate × the largest delay.
    pub held_bytes: u64,
}

/// The smallest frame a queue in packets is counted with (Ethernet's
/// minimum), to bound the slots a queue in bytes may fill.
const MIN_FRAME_BYTES: u64 = 64;

/// The largest delay a packet of `link` can get, and its parts: `delay`;
/// the jitter's reach (`Distribution::reach_ns`: the largest draw of the
/// distribution, whose tail may be long: Pareto reaches ~240 000 × jitter);
/// the longest wait for a `slot` (its largest gap, times the slots a full
/// queue needs when each slot carries a bounded number of packets or bytes).
/// A packet released later than this is impossible, so a bound on it bounds
/// how long the kernel may hold a claim's packets.
pub fn largest_delay_ns(link: &linkem_core::LinkConfig) -> (u64, [u64; 3]) {
    let reach_ns = link.distribution.reach_ns(link.jitter_ns);
    let slot_ns = match &link.slot {
        None => 0,
        Some(slot) => {
            let gap_ns = match &slot.distribution {
                Some((dist, delay_ns, jitter_ns)) => {
                    delay_ns.saturating_add(dist.reach_ns(*jitter_ns))
                }
                None => slot.max_ns.max(slot.min_ns),
            };
            let (queue_packets, queue_bytes) = match (link.queue_packets, link.queue_bytes) {
                (Some(p), _) => (u64::from(p), u64::from(p) * MAX_FRAME_BYTES),
                (None, Some(b)) => (b.div_ceil(MIN_FRAME_BYTES), b),
                (None, None) => (50, 50 * MAX_FRAME_BYTES),
            };
            let by_packets = slot
                .packets
                .map_or(1, |p| queue_packets.div_ceil(u64::from(p.max(1))));
            let by_bytes = slot.bytes.map_or(1, |b| queue_bytes.div_ceil(b.max(1)));
            gap_ns.saturating_mul(by_packets.max(by_bytes).max(1))
        }
    };
    let parts = [link.delay_ns, reach_ns, slot_ns];
    (parts.iter().fold(0u64, |a, &b| a.saturating_add(b)), parts)
}

impl PipeAsk {
    pub fn of(link: &linkem_core::LinkConfig) -> PipeAsk {
        let queue = match (link.queue_bytes, link.queue_packets) {
            (Some(b), _) => b,
            (None, Some(p)) => p as u64 * MAX_FRAME_BYTES,
            // Dummynet's 50 slots.
            (None, None) => 50 * MAX_FRAME_BYTES,
        };
        let (delay_ns, delay_parts_ns) = largest_delay_ns(link);
        let held = match link.rate_bps {
            Some(r) => queue as u128 + r as u128 * delay_ns as u128 / 8_000_000_000,
            None => u128::from(u64::MAX),
        };
        PipeAsk {
            rate_bps: link.rate_bps,
            delay_ns,
            delay_parts_ns,
            held_bytes: held.min(u128::from(u64::MAX)) as u64,
        }
    }
}

/// One claim.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub proto: Proto,
    pub ports: (u16, u16),
    pub uid: u32,
    /// The process that claimed or renewed it last.
    pub pid: i32,
    pub slot: u32,
    /// The words of each direction's pipe (side a, side b).
    pub words: [Vec<String>; 2],
    /// What its two pipes may hold (the limits' `queue`).
    pub held_bytes: u64,
    pub created_ns: u64,
    pub renewed_ns: u64,
    pub expires_ns: u64,
    /// Changes of its pipes since it was made.
    pub changes: u64,
}

/// `udp 5678` or `tcp 8000-8010`.
pub fn ports_text(proto: Proto, (a, b): (u16, u16)) -> String {
    if a == b {
        format!("{} {a}", proto.word())
    } else {
        format!("{} {a}-{b}", proto.word())
    }
}

impl Claim {
    /// Its pipes (and rules): side a's, side b's.
    pub fn numbers(&self) -> [u32; 2] {
        numbers(self.slot)
    }

    pub fn name(&self) -> String {
        ports_text(self.proto, self.ports)
    }

    fn overlaps(&self, proto: Proto, (a, b): (u16, u16)) -> bool {
        self.proto == proto && self.ports.0 <= b && a <= self.ports.1
    }

    fn port_count(&self) -> u64 {
        u64::from(self.ports.1 - self.ports.0) + 1
    }
}

/// The pipe (and rule) numbers of slot `slot`: side a's, side b's.
pub fn numbers(slot: u32) -> [u32; 2] {
    [CLAIM_FIRST + 2 * slot, CLAIM_FIRST + 2 * slot + 1]
}

/// Every claim held, by slot.
#[derive(Debug, Default)]
pub struct Table {
    claims: BTreeMap<u32, Claim>,
}

/// Bytes for messages: `64MiB`, `1.5KiB`.
fn bytes_text(b: u64) -> String {
    if b == u64::MAX {
        return "unbounded".into();
    }
    let mut v = b as f64;
    for unit in ["B", "KiB", "MiB", "GiB", "TiB"] {
        if v < 1024.0 || unit == "TiB" {
            return if unit == "B" {
                format!("{b}B")
            } else {
                format!("{}{unit}", (v * 10.0).round() / 10.0)
            };
        }
        v /= 1024.0;
    }
    unreachable!("the loop returns at TiB")
}

impl Table {
    pub fn len(&self) -> usize {
        self.claims.len()
    }

    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Claim> {
        self.claims.values()
    }

    pub fn get(&self, slot: u32) -> Option<&Claim> {
        self.claims.get(&slot)
    }

    /// Which claim of `uid` a request for `proto ports` names: `Ok(Some)`
    /// the slot of its claim of exactly these ports, `Ok(None)` when no
    /// claim overlaps them; refused when another user's claim overlaps
    /// them (naming its owner), an error when one of the user's own claims
    /// overlaps them without being the same ports.
    pub fn find(&self, uid: u32, proto: Proto, ports: (u16, u16)) -> Result<Option<u32>, Failure> {
        let asked = ports_text(proto, ports);
        let mut mine = None;
        for c in self.claims.values().filter(|c| c.overlaps(proto, ports)) {
            if c.uid != uid {
                return Err(Failure::Refused(format!(
                    "{asked}: {} is claimed by uid {} (until it is released or expires)",
                    c.name(),
                    c.uid
                )));
            }
            if c.ports != ports {
                return Err(Failure::Error(format!(
                    "{asked} overlaps your claim {}: release it first, or name exactly its ports",
                    c.name()
                )));
            }
            mine = Some(c.slot);
        }
        Ok(mine)
    }

    /// The first free slot, or why there is none.
    pub fn free_slot(&self) -> Result<u32, Failure> {
        (0..MAX_CLAIMS)
            .find(|s| !self.claims.contains_key(s))
            .ok_or_else(|| {
                Failure::Refused(format!(
                    "all {MAX_CLAIMS} claims of this emulator are taken"
                ))
            })
    }

    /// Whether `uid` may hold the claim `ports` (in `slot`, if it holds it
    /// already) with pipes asking `asks` under `limit`; the refusal names
    /// the limit, its value and what was asked.
    pub fn check_limits(
        &self,
        uid: u32,
        limit: &Limit,
        held: Option<u32>,
        ports: (u16, u16),
        asks: &[PipeAsk; 2],
    ) -> Result<(), Failure> {
        let refuse = |m: String| {
            let (limit, detail) = m.split_once(": ").unwrap_or((&m, ""));
            Err(Failure::Refused(format!(
                "limit {limit} for uid {uid}: {detail}"
            )))
        };
        let others: Vec<&Claim> = self
            .claims
            .values()
            .filter(|c| c.uid == uid && Some(c.slot) != held)
            .collect();
        if let (None, Some(max)) = (held, limit.claims) {
            if others.len() as u64 >= max {
                return refuse(format!(
                    "claims={max}: it holds {} claims (release one first)",
                    others.len()
                ));
            }
        }
        let ports_asked = u64::from(ports.1 - ports.0) + 1;
        if let Some(max) = limit.ports {
            let held_ports: u64 = others.iter().map(|c| c.port_count()).sum();
            if held_ports + ports_asked > max {
                return refuse(format!(
                    "ports={max}: the claim asks {ports_asked} ports, its other claims hold {held_ports}"
                ));
            }
        }
        for (dir, ask) in ["a-to-b", "b-to-a"].iter().zip(asks) {
            if let Some(max) = limit.rate_bps {
                match ask.rate_bps {
                    Some(r) if r > max => {
                        return refuse(format!(
                            "rate={}: the {dir} pipe asks bw {}",
                            format_rate_bps(max),
                            format_rate_bps(r)
                        ))
                    }
                    Some(_) => {}
                    None => {
                        return refuse(format!(
                            "rate={}: the {dir} pipe has no bw",
                            format_rate_bps(max)
                        ))
                    }
                }
            }
            if let Some(max) = limit.delay_ns {
                if ask.delay_ns > max {
                    let [d, j, slot] = ask.delay_parts_ns;
                    let parts = if j == 0 && slot == 0 {
                        String::new()
                    } else {
                        format!(
                            " at most (delay {} + the jitter's reach {} + slot waits {})",
                            format_time_ns(d),
                            format_time_ns(j),
                            format_time_ns(slot)
                        )
                    };
                    return refuse(format!(
                        "delay={}: the {dir} pipe asks delay {}{parts}",
                        format_time_ns(max),
                        format_time_ns(ask.delay_ns)
                    ));
                }
            }
        }
        if let Some(max) = limit.queue_bytes {
            let this = asks[0].held_bytes.saturating_add(asks[1].held_bytes);
            let rest = others
                .iter()
                .map(|c| c.held_bytes)
                .fold(0u64, u64::saturating_add);
            if this.saturating_add(rest) > max {
                return refuse(format!(
                    "queue={}: the claim's pipes may hold {} (queue + rate × delay), \
                     its other claims {}",
                    bytes_text(max),
                    bytes_text(this),
                    bytes_text(rest)
                ));
            }
        }
        Ok(())
    }

    /// Puts (or replaces) a claim in its slot.
    pub fn put(&mut self, claim: Claim) {
        self.claims.insert(claim.slot, claim);
    }

    pub fn remove(&mut self, slot: u32) -> Option<Claim> {
        self.claims.remove(&slot)
    }

    /// The claims whose time is up at `now_ns`, taken out of the table.
    pub fn take_expired(&mut self, now_ns: u64) -> Vec<Claim> {
        let due: Vec<u32> = self
            .claims
            .values()
            .filter(|c| c.expires_ns <= now_ns)
            .map(|c| c.slot)
            .collect();
        due.into_iter()
            .filter_map(|s| self.claims.remove(&s))
            .collect()
    }

    /// The earliest expiry, if any claim is held.
    pub fn next_expiry_ns(&self) -> Option<u64> {
        self.claims.values().map(|c| c.expires_ns).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(uid: u32, slot: u32, ports: (u16, u16), held: u64, expires_ns: u64) -> Claim {
        Claim {
            proto: Proto::Udp,
            ports,
            uid,
            pid: 1,
            slot,
            words: Default::default(),
            held_bytes: held,
            created_ns: 0,
            renewed_ns: 0,
            expires_ns,
            changes: 0,
        }
    }

    fn ask(rate_bps: u64, delay_ns: u64) -> PipeAsk {
        let link = linkem_core::LinkConfig {
            rate_bps: Some(rate_bps),
            delay_ns,
            queue_packets: Some(50),
            ..Default::default()
        };
        PipeAsk::of(&link)
    }

    #[test]
    fn a_port_belongs_to_one_user_and_ranges_overlap() {
        let mut t = Table::default();
        t.put(claim(1001, 0, (5678, 5678), 0, u64::MAX));
        t.put(claim(1002, 1, (6000, 6010), 0, u64::MAX));
        assert_eq!(t.find(1001, Proto::Udp, (5678, 5678)), Ok(Some(0)));
        // The same number over tcp is another port.
        assert_eq!(t.find(1002, Proto::Tcp, (5678, 5678)), Ok(None));
        let e = t.find(1002, Proto::Udp, (5678, 5678)).unwrap_err();
        assert_eq!(
            e,
            Failure::Refused(
                "udp 5678: udp 5678 is claimed by uid 1001 (until it is released or expires)"
                    .into()
            )
        );
        // A range reaching into another's claim, at either end.
        for (r, owner) in [
            ((5670, 5678), 1001),
            ((5678, 5690), 1001),
            ((6010, 6020), 1002),
            ((5999, 6000), 1002),
            ((6005, 6005), 1002),
        ] {
            let asker = 3000;
            let e = t.find(asker, Proto::Udp, r).unwrap_err();
            assert!(
                matches!(&e, Failure::Refused(m) if m.contains(&format!("claimed by uid {owner}"))),
                "{r:?}: {e:?}"
            );
        }
        // One's own claim, overlapped but not the same: an error, not a refusal.
        let e = t.find(1002, Proto::Udp, (6010, 6012)).unwrap_err();
        assert_eq!(
            e,
            Failure::Error(
                "udp 6010-6012 overlaps your claim udp 6000-6010: release it first, or name \
                 exactly its ports"
                    .into()
            )
        );
        assert_eq!(t.find(1001, Proto::Udp, (6011, 7000)), Ok(None));
        assert_eq!(t.free_slot(), Ok(2));
        t.remove(0);
        assert_eq!(t.free_slot(), Ok(0));
        assert_eq!(numbers(0), [40_000, 40_001]);
        assert_eq!(numbers(MAX_CLAIMS - 1), [CLAIM_LAST - 1, CLAIM_LAST]);
        assert!(reserved(CLAIM_FIRST) && reserved(CLAIM_LAST) && !reserved(CLAIM_LAST + 1));
    }

    #[test]
    fn claims_expire_at_their_time_and_renewal_moves_it() {
        let mut t = Table::default();
        t.put(claim(1001, 0, (1, 1), 0, 1_000));
        t.put(claim(1002, 1, (2, 2), 0, 2_000));
        assert_eq!(t.next_expiry_ns(), Some(1_000));
        assert!(t.take_expired(999).is_empty());
        let gone = t.take_expired(1_000);
        assert_eq!(gone.iter().map(|c| c.slot).collect::<Vec<_>>(), [0]);
        // Renewed: the same claim with a later expiry.
        let mut c = t.get(1).unwrap().clone();
        c.expires_ns = 5_000;
        t.put(c);
        assert!(t.take_expired(4_999).is_empty());
        assert_eq!(t.take_expired(5_000).len(), 1);
        assert!(t.is_empty());
    }

    /// Issue 34, item 2: `slot 600s` held packets in the kernel's queue for
    /// ten minutes under a `delay` limit of 5 s, which looked at `delay` only.
    #[test]
    fn the_delay_limit_bounds_delay_jitter_reach_and_slot_waits() {
        let limit = Limit {
            delay_ns: Some(5_000_000_000),
            ..Limit::NONE
        };
        let t = Table::default();
        let slotted = linkem_core::LinkConfig {
            rate_bps: Some(1_000_000),
            delay_ns: 1_000_000,
            queue_packets: Some(50),
            slot: Some(linkem_core::config::SlotConfig {
                min_ns: 600_000_000_000,
                max_ns: 600_000_000_000,
                distribution: None,
                packets: None,
                bytes: None,
            }),
            ..Default::default()
        };
        let a = PipeAsk::of(&slotted);
        assert_eq!(a.delay_ns, 600_001_000_000);
        let m = match t.check_limits(1001, &limit, None, (1, 1), &[a, a]) {
            Err(Failure::Refused(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            m,
            "limit delay=5s for uid 1001: the a-to-b pipe asks delay 600.001s at most \
             (delay 1ms + the jitter's reach 0ns + slot waits 600s)"
        );
        // A slot carrying 5 packets needs 10 slots for a queue of 50.
        let mut five = slotted.clone();
        if let Some(s) = five.slot.as_mut() {
            s.min_ns = 100_000_000;
            s.max_ns = 100_000_000;
            s.packets = Some(5);
        }
        assert_eq!(largest_delay_ns(&five).1, [1_000_000, 0, 1_000_000_000]);
        // Normal jitter of 100 ms reaches about 8.3 × 100 ms.
        let jittery = linkem_core::LinkConfig {
            rate_bps: Some(1_000_000),
            delay_ns: 100_000_000,
            jitter_ns: 100_000_000,
            distribution: std::sync::Arc::new(linkem_core::dist::Distribution::Normal),
            ..Default::default()
        };
        let a = PipeAsk::of(&jittery);
        assert!((900_000_000..1_000_000_000).contains(&a.delay_ns), "{a:?}");
        assert_eq!(t.check_limits(1001, &limit, None, (1, 1), &[a, a]), Ok(()));
    }

    #[test]
    fn each_limit_refuses_naming_itself_and_the_value() {
        let limit = Limit {
            claims: Some(2),
            ports: Some(10),
            rate_bps: Some(10_000_000),
            delay_ns: Some(1_000_000_000),
            queue_bytes: Some(3 << 20),
        };
        let mut t = Table::default();
        let ok = [ask(1_000_000, 10_000_000); 2];
        assert_eq!(t.check_limits(1001, &limit, None, (1, 1), &ok), Ok(()));
        let refused = |r: Result<(), Failure>| match r {
            Err(Failure::Refused(m)) => m,
            other => panic!("{other:?}"),
        };
        let m = refused(t.check_limits(1001, &limit, None, (1, 1), &[ok[0], ask(20_000_000, 0)]));
        assert_eq!(
            m,
            "limit rate=10mbit for uid 1001: the b-to-a pipe asks bw 20mbit"
        );
        let m = refused(t.check_limits(
            1001,
            &limit,
            None,
            (1, 1),
            &[ask(1_000, 2_000_000_000), ok[1]],
        ));
        assert_eq!(
            m,
            "limit delay=1s for uid 1001: the a-to-b pipe asks delay 2s"
        );
        let m = refused(t.check_limits(1001, &limit, None, (1, 11), &ok));
        assert!(
            m.starts_with("limit ports=10 for uid 1001: the claim asks 11 ports"),
            "{m}"
        );
        // 10 Mbit/s for 1 s is 1.25 MB in flight on each pipe, plus its 50 slots.
        let big = [ask(10_000_000, 1_000_000_000); 2];
        let m = refused(t.check_limits(1001, &limit, None, (1, 1), &big));
        assert!(
            m.starts_with("limit queue=3MiB for uid 1001: the claim's pipes may hold 3.3MiB"),
            "{m}"
        );
        t.put(claim(1001, 0, (1, 1), 3 << 20, u64::MAX));
        let m = refused(t.check_limits(1001, &limit, None, (2, 2), &ok));
        assert!(m.contains("its other claims 3MiB"), "{m}");
        // The claim held is not counted twice when it changes.
        assert_eq!(t.check_limits(1001, &limit, Some(0), (1, 1), &ok), Ok(()));
        t.put(claim(1001, 1, (2, 2), 0, u64::MAX));
        let m = refused(t.check_limits(1001, &limit, None, (3, 3), &[ask(1, 0); 2]));
        assert_eq!(
            m,
            "limit claims=2 for uid 1001: it holds 2 claims (release one first)"
        );
        // Another user's claims count for it alone.
        assert_eq!(t.check_limits(1002, &limit, None, (3, 3), &ok), Ok(()));
        // No bw under a rate limit: refused (the server gives such a pipe the limit's rate).
        let unshaped = PipeAsk::of(&linkem_core::LinkConfig::default());
        let m = refused(t.check_limits(1002, &limit, None, (3, 3), &[unshaped; 2]));
        assert_eq!(
            m,
            "limit rate=10mbit for uid 1002: the a-to-b pipe has no bw"
        );
        assert_eq!(
            t.check_limits(0, &Limit::NONE, None, (1, 65535), &[unshaped; 2]),
            Ok(())
        );
    }

    /// Lines as the kernel writes them (Linux 6.x): root's sshd listening
    /// on 22 (v4 and v6), a TIME_WAIT leftover (inode 0) on 40000, uid
    /// 1001's connection from 41000, uid 107's avahi on udp 5353.
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 20861 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:9C40 0100007F:0016 06 00000000:00000000 03:00000F9E 00000000     0        0 0 3 0000000000000000\n   2: 0A00020F:A028 5DB8D822:01BB 01 00000000:00000000 02:000004C5 00000000  1001        0 51200 2 0000000000000000 20 4 30 10 -1\n";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 20863 1 0000000000000000 100 0 0 10 0\n";
    const UDP: &str = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n  300: 00000000:14E9 00000000:0000 07 00000000:00000000 00:00000000 00000000   107        0 18523 2 0000000000000000 0\n";

    fn view(start: u32) -> PortView {
        let mut tcp = parse_socket_table(TCP).unwrap();
        tcp.extend(parse_socket_table(TCP6).unwrap());
        PortView {
            unprivileged_start: start,
            tcp,
            udp: parse_socket_table(UDP).unwrap(),
        }
    }

    #[test]
    fn socket_tables_give_each_bound_port_and_its_uid() {
        assert_eq!(
            parse_socket_table(TCP).unwrap(),
            [
                PortHolder { port: 22, uid: 0 },
                PortHolder {
                    port: 41000,
                    uid: 1001
                }
            ]
        );
        assert_eq!(
            parse_socket_table(TCP6).unwrap(),
            [PortHolder { port: 22, uid: 0 }]
        );
        assert_eq!(
            parse_socket_table(UDP).unwrap(),
            [PortHolder {
                port: 5353,
                uid: 107
            }]
        );
        assert_eq!(parse_socket_table("header only\n").unwrap(), []);
        let e = parse_socket_table("header\n 0: 00000000:zz 0 0 0 0 0 0 0 1\n").unwrap_err();
        assert_eq!(e, "line 2: not a socket table line");
        // This machine's own tables parse (the format is the kernel's).
        PortView::read().unwrap();
    }

    #[test]
    fn a_port_is_claimable_if_bindable_or_allowed_and_a_refusal_names_the_rule() {
        let v = view(1024);
        let refused = |r: Result<(), Failure>| match r {
            Err(Failure::Refused(m)) => m,
            other => panic!("{other:?}"),
        };
        let m = refused(check_ports(1001, Proto::Tcp, (22, 22), &v, &[]));
        assert_eq!(
            m,
            "tcp 22: tcp port 22 is below ip_unprivileged_port_start (1024); uid 1001 may claim \
             only ports it could bind, or those root's --limits allows it (allow=tcp:PORT)"
        );
        let m = refused(check_ports(1001, Proto::Udp, (5353, 5353), &v, &[]));
        assert!(
            m.starts_with("udp 5353: udp port 5353 is held by a socket of uid 107;"),
            "{m}"
        );
        // Port by port: the first one refused is named.
        let m = refused(check_ports(1002, Proto::Tcp, (40990, 41010), &v, &[]));
        assert!(
            m.starts_with("tcp 40990-41010: tcp port 41000 is held by a socket of uid 1001;"),
            "{m}"
        );
        // One's own socket, a TIME_WAIT leftover, the other protocol: free.
        check_ports(1001, Proto::Tcp, (40990, 41010), &v, &[]).unwrap();
        check_ports(1001, Proto::Tcp, (40000, 40000), &v, &[]).unwrap();
        check_ports(1001, Proto::Udp, (41000, 41000), &v, &[]).unwrap();
        check_ports(107, Proto::Udp, (5353, 5353), &v, &[]).unwrap();
        // A sysctl of 0 lets anyone bind any port; sshd still holds 22.
        let m = refused(check_ports(1001, Proto::Tcp, (1, 100), &view(0), &[]));
        assert!(
            m.starts_with("tcp 1-100: tcp port 22 is held by a socket of uid 0;"),
            "{m}"
        );
        // Root's allow overrides both rules, for its protocol and ports only.
        let allow = [
            PortAllow::parse("tcp:22").unwrap(),
            PortAllow::parse("udp:5000-5400").unwrap(),
        ];
        check_ports(1001, Proto::Tcp, (22, 22), &v, &allow).unwrap();
        check_ports(1001, Proto::Udp, (5353, 5353), &v, &allow).unwrap();
        let m = refused(check_ports(1001, Proto::Udp, (22, 22), &v, &allow));
        assert!(m.contains("udp port 22 is below"), "{m}");
        let m = refused(check_ports(1001, Proto::Tcp, (21, 22), &v, &allow));
        assert!(m.contains("tcp port 21 is below"), "{m}");
    }

    #[test]
    fn the_limits_file_allows_ports_per_user() {
        let l = Limits::parse(
            "default allow=udp:5353\n1001 allow=tcp:22,tcp:8000-8100 allow=udp:53\n1002 claims=1\n\
             1003 allow=none\n",
        )
        .unwrap();
        let pa = |t: &str| PortAllow::parse(t).unwrap();
        assert_eq!(
            l.allowed(1001),
            [pa("tcp:22"), pa("tcp:8000-8100"), pa("udp:53")]
        );
        // A line without allow takes the default's; 'none' takes it away.
        assert_eq!(l.allowed(1002), [pa("udp:5353")]);
        assert_eq!(l.allowed(1004), [pa("udp:5353")]);
        assert_eq!(l.allowed(1003), []);
        assert_eq!(pa("udp:53").ports, (53, 53));
        for (text, says) in [
            (
                "1001 allow=sctp:1",
                "line 1: 'allow=sctp:1': 'sctp:1': PROTO:PORT",
            ),
            (
                "1001 allow=udp:0",
                "line 1: 'allow=udp:0': 'udp:0': PROTO:PORT",
            ),
            ("1001 allow=udp:70000", "'udp:70000': PROTO:PORT"),
            (
                "1001 allow=udp:9-8",
                "'udp:9-8': the first port is above the last",
            ),
            ("1001 allow=udp", "'udp': PROTO:PORT"),
        ] {
            let e = Limits::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn the_limits_file_names_users_and_defaults() {
        let l = Limits::parse(
            "# root's limits\ndefault claims=4 rate=10Mbit/s\n1001 claims=1 delay=100ms # one\n\
             1002 queue=none rate=none\n\n",
        )
        .unwrap();
        assert_eq!(l.of(1001).claims, Some(1));
        assert_eq!(l.of(1001).rate_bps, Some(10_000_000));
        assert_eq!(l.of(1001).delay_ns, Some(100_000_000));
        assert_eq!(l.of(1002).queue_bytes, None);
        assert_eq!(l.of(1002).rate_bps, None);
        assert_eq!(l.of(1002).claims, Some(4));
        assert_eq!(l.of(1003).claims, Some(4));
        assert_eq!(l.of(1003).queue_bytes, Limit::BUILT_IN.queue_bytes);
        assert_eq!(l.of(0), Limit::NONE);
        assert_eq!(Limits::default().of(1003), Limit::BUILT_IN);
        for (text, says) in [
            ("bob claims=1", "line 1: 'bob': a line starts with a uid"),
            ("1001 claims=x", "line 1: 'claims=x': a count (or none)"),
            ("1001 claims", "line 1: 'claims': KEY=VALUE expected"),
            (
                "default\n1001 speed=1",
                "line 2: 'speed=1': unknown limit 'speed'",
            ),
            ("1001 rate=5", "line 1: 'rate=5': "),
            (
                "1001 claims=1\n1001 claims=2",
                "line 2: '1001' has a line already",
            ),
        ] {
            let e = Limits::parse(text).unwrap_err();
            assert!(e.starts_with(says), "{text}: {e}");
        }
    }
}

//! The per-user limits root sets (`--limits FILE`): claims, ports, rate,
//! delay and queue bytes for each uid (`default` for the others), and the
//! ports a user may claim whatever the port rule says (`allow=`).

use anyhow::Result;
use linkem_core::units::{parse_rate_bps, parse_size_bytes, parse_time_ns, UnitError};
use linkem_ctl::Proto;
use std::collections::HashMap;

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
    pub(super) fn parse(text: &str) -> Result<PortAllow, String> {
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

    pub(super) fn covers(&self, proto: Proto, port: u16) -> bool {
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
        // A rate, time or size in its units, or none.
        let quantity = |parse: fn(&str) -> Result<u64, UnitError>| {
            if none {
                return Ok(None);
            }
            parse(value).map(Some).map_err(|e| at(e.to_string()))
        };
        match key {
            "claims" => l.claims = if none { None } else { Some(count()?) },
            "ports" => l.ports = if none { None } else { Some(count()?) },
            "rate" => l.rate_bps = quantity(parse_rate_bps)?,
            "delay" => l.delay_ns = quantity(parse_time_ns)?,
            "queue" => l.queue_bytes = quantity(parse_size_bytes)?,
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

//! Link configuration: the words users type (netem's and Dummynet's), and the
//! same options from a TOML file.
//!
//! # Words
//! Order does not matter; a later word overrides an earlier one.
//!
//! | words | meaning |
//! |---|---|
//! | `rate R`, `bw R` | link rate; see [`crate::units::parse_rate_bps`] for units |
//! | `overhead N`, `overhead ethernet` | bytes added to each frame on the wire (ethernet = 24: preamble 8, gap 12, FCS 4) |
//! | `queue N`, `limit N` | queue limit in packets (default 1000) |
//! | `queue SIZE` | queue limit in frame bytes (`64KiB`, `100kB`, `1500B`) |
//! | `queue unlimited` | no queue limit |
//! | `delay D [J [C%]]`, `jitter J` | delay, jitter, correlation of successive delays |
//! | `distribution NAME` | `uniform` (default), `normal`, `pareto`, `paretonormal`, `exponential`, or a file |
//! | `reorder allow` | let jitter reorder packets (by default releases never go backwards) |
//! | `reorder P% [C%] [gap N]`, `gap N` | netem: send one packet in N (with probability P) without its delay |
//! | `loss P% [C%]`, `loss random P% [C%]`, `plr X` | random loss |
//! | `loss ber X` | bit error rate |
//! | `loss gemodel p [r [1-h [1-k]]]` | Gilbert-Elliott |
//! | `loss state p13 [p31 [p32 [p23 [p14]]]]` | 4-state Markov |
//! | `loss-at arrival`, `loss-at link` | where a random loss strikes: before the queue (default), or after using the link |
//! | `duplicate P% [C%]` | send a second copy right after the packet |
//! | `corrupt P% [C%]` | flip one random bit of the frame |
//! | `policer R burst SIZE` | token bucket that drops what exceeds R with bucket SIZE |
//! | `seed N` | the seed of every random draw |
//!
//! A leading `netem` or `pipe N config` is skipped, so a tc or ipfw line can be
//! pasted as is.

use crate::dist::Distribution;
use crate::loss::LossConfig;
use crate::units::{self, format_rate_bps, format_time_ns, UnitError};
use std::fmt;
use std::sync::Arc;

/// The default queue limit, in packets (netem's and Linux's txqueuelen default).
pub const DEFAULT_QUEUE_PACKETS: u32 = 1000;
/// Framing overhead of Ethernet on the wire: preamble and start delimiter (8),
/// inter-frame gap (12) and FCS (4), for captures that exclude the FCS.
pub const ETHERNET_OVERHEAD_BYTES: u32 = 24;
/// Largest policer bucket: keeps the bucket's exact integer arithmetic in u64.
pub const MAX_POLICER_BURST_BYTES: u64 = 1 << 30;

/// Where a random loss takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossAt {
    /// Before the queue: a lost packet never occupies the queue or the link.
    Arrival,
    /// After the link: a lost packet is queued and transmitted, then lost (a
    /// noisy wire rather than a full router).
    Link,
}

/// A token-bucket policer (MoonEm §5.5): tokens accrue at `rate_bps` up to
/// `burst_bytes`; a packet whose frame bytes exceed the tokens is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicerConfig {
    pub rate_bps: u64,
    pub burst_bytes: u64,
}

/// One direction's link, parsed once and then immutable.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    pub rate_bps: Option<u64>,
    pub overhead_bytes: u32,
    /// `None`: no limit in packets.
    pub queue_packets: Option<u32>,
    /// `None`: no limit in bytes.
    pub queue_bytes: Option<u64>,
    pub delay_ns: u64,
    pub jitter_ns: u64,
    pub delay_correlation: f64,
    pub distribution: Arc<Distribution>,
    pub reorder_allow: bool,
    pub reorder_probability: f64,
    pub reorder_correlation: f64,
    pub reorder_gap: u32,
    pub loss: LossConfig,
    pub loss_at: LossAt,
    pub duplicate: f64,
    pub duplicate_correlation: f64,
    pub corrupt: f64,
    pub corrupt_correlation: f64,
    pub policer: Option<PolicerConfig>,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            rate_bps: None,
            overhead_bytes: 0,
            queue_packets: Some(DEFAULT_QUEUE_PACKETS),
            queue_bytes: None,
            delay_ns: 0,
            jitter_ns: 0,
            delay_correlation: 0.0,
            distribution: Arc::new(Distribution::Uniform),
            reorder_allow: false,
            reorder_probability: 0.0,
            reorder_correlation: 0.0,
            reorder_gap: 0,
            loss: LossConfig::None,
            loss_at: LossAt::Arrival,
            duplicate: 0.0,
            duplicate_correlation: 0.0,
            corrupt: 0.0,
            corrupt_correlation: 0.0,
            policer: None,
        }
    }
}

/// A link plus the seed, as parsed from words or a file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinkSpec {
    pub link: LinkConfig,
    pub seed: Option<u64>,
}

/// A word that could not be used, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{word}' (word {position}): {message}")]
pub struct ConfigError {
    /// 1-based position of the offending word.
    pub position: usize,
    pub word: String,
    pub message: String,
}

/// Reads a distribution file by name; the core does no I/O, so the caller
/// supplies this (the binary reads the file system, tests supply text).
pub type FileLoader<'a> = dyn FnMut(&str) -> Result<String, String> + 'a;

/// A loader for callers that have no files: every name is unknown.
pub fn no_files(name: &str) -> Result<String, String> {
    Err(format!("no such distribution '{name}'"))
}

struct Words<'w> {
    words: &'w [&'w str],
    next: usize,
}

impl<'w> Words<'w> {
    fn peek(&self) -> Option<&'w str> {
        self.words.get(self.next).copied()
    }

    fn error(&self, at: usize, message: impl Into<String>) -> ConfigError {
        let at = at.min(self.words.len().saturating_sub(1));
        ConfigError {
            position: at + 1,
            word: self.words.get(at).copied().unwrap_or("").to_string(),
            message: message.into(),
        }
    }

    /// The next word, which `keyword` requires.
    fn arg(&mut self, keyword: &str, what: &str) -> Result<(usize, &'w str), ConfigError> {
        match self.peek() {
            Some(w) => {
                self.next += 1;
                Ok((self.next - 1, w))
            }
            None => Err(self.error(
                self.next.saturating_sub(1),
                format!("'{keyword}' needs {what}"),
            )),
        }
    }

    fn unit<T>(&self, at: usize, r: Result<T, UnitError>) -> Result<T, ConfigError> {
        r.map_err(|e| self.error(at, e.0))
    }

    /// Takes the next word if it is a percentage (an optional trailing argument).
    fn optional_percent(&mut self) -> Result<Option<f64>, ConfigError> {
        match self.peek() {
            Some(w) if w.ends_with('%') => {
                self.next += 1;
                self.unit(self.next - 1, units::parse_percent(w)).map(Some)
            }
            _ => Ok(None),
        }
    }

    fn percent(&mut self, keyword: &str) -> Result<f64, ConfigError> {
        let (at, w) = self.arg(keyword, "a percentage")?;
        self.unit(at, units::parse_percent(w))
    }
}

fn starts_with_digit(w: &str) -> bool {
    w.as_bytes()
        .first()
        .is_some_and(|b| b.is_ascii_digit() || *b == b'.')
}

impl LinkSpec {
    /// Parses link words. `files` reads a distribution file named by
    /// `distribution FILE`.
    pub fn parse_words(
        words: &[&str],
        files: &mut FileLoader<'_>,
    ) -> Result<LinkSpec, ConfigError> {
        let mut spec = LinkSpec::default();
        let mut queue_packets: Option<Option<u32>> = None;
        let mut queue_bytes: Option<Option<u64>> = None;
        let mut distribution: Option<(usize, Distribution)> = None;
        let mut gap_at: Option<usize> = None;
        let mut w = Words { words, next: 0 };
        let link = &mut spec.link;

        // Pasted command lines.
        if w.peek() == Some("netem") {
            w.next += 1;
        } else if w.peek() == Some("pipe") && words.get(2) == Some(&"config") {
            w.next += 3;
        }

        while let Some(word) = w.peek() {
            let at = w.next;
            w.next += 1;
            match word {
                "rate" | "bw" => {
                    let (a, v) = w.arg(word, "a rate such as 10mbit")?;
                    link.rate_bps = Some(w.unit(a, units::parse_rate_bps(v))?);
                }
                "overhead" => {
                    let (a, v) = w.arg(word, "a byte count or 'ethernet'")?;
                    link.overhead_bytes = match v {
                        "ethernet" => ETHERNET_OVERHEAD_BYTES,
                        _ => {
                            let n = w.unit(a, units::parse_count(v))?;
                            if n > 65_535 {
                                return Err(w.error(a, "an overhead is at most 65535 bytes"));
                            }
                            n as u32
                        }
                    };
                }
                "queue" | "limit" => {
                    let (a, v) = w.arg(word, "a packet count or a size such as 64KiB")?;
                    if v == "unlimited" && word == "queue" {
                        queue_packets = Some(None);
                        queue_bytes = Some(None);
                    } else if v.bytes().all(|b| b.is_ascii_digit()) {
                        let n = w.unit(a, units::parse_count(v))?;
                        if n == 0 {
                            return Err(
                                w.error(a, format!("{word} 0: a queue holds at least one packet"))
                            );
                        }
                        if n > u32::MAX as u64 {
                            return Err(w.error(a, format!("{word} {v}: too many packets")));
                        }
                        queue_packets = Some(Some(n as u32));
                    } else if word == "limit" {
                        return Err(
                            w.error(a, "limit takes a packet count (use 'queue SIZE' for bytes)")
                        );
                    } else {
                        let n = w.unit(a, units::parse_size_bytes(v))?;
                        if n == 0 {
                            return Err(w.error(a, "queue 0B: a queue holds at least one byte"));
                        }
                        queue_bytes = Some(Some(n));
                        if queue_packets.is_none() {
                            queue_packets = Some(None);
                        }
                    }
                }
                "delay" => {
                    let (a, v) = w.arg(word, "a time such as 10ms")?;
                    link.delay_ns = w.unit(a, units::parse_time_ns(v))?;
                    if let Some(j) = w
                        .peek()
                        .filter(|j| starts_with_digit(j) && !j.ends_with('%'))
                    {
                        w.next += 1;
                        link.jitter_ns = w.unit(w.next - 1, units::parse_time_ns(j))?;
                        if let Some(c) = w.optional_percent()? {
                            link.delay_correlation = c;
                        }
                    }
                }
                "jitter" => {
                    let (a, v) = w.arg(word, "a time such as 1ms")?;
                    link.jitter_ns = w.unit(a, units::parse_time_ns(v))?;
                }
                "distribution" => {
                    let (a, v) = w.arg(
                        word,
                        "a name (uniform, normal, pareto, paretonormal, exponential) or a file",
                    )?;
                    let d = match Distribution::builtin(v) {
                        Some(d) => d,
                        None => {
                            let text = files(v).map_err(|e| w.error(a, e))?;
                            Distribution::parse_file(v, &text).map_err(|e| w.error(a, e))?
                        }
                    };
                    distribution = Some((a, d));
                }
                "reorder" => {
                    if w.peek() == Some("allow") {
                        w.next += 1;
                        link.reorder_allow = true;
                    } else {
                        link.reorder_probability = w.percent(word)?;
                        if let Some(c) = w.optional_percent()? {
                            link.reorder_correlation = c;
                        }
                    }
                }
                "gap" => {
                    let (a, v) = w.arg(word, "a packet count")?;
                    let n = w.unit(a, units::parse_count(v))?;
                    if n == 0 || n > u32::MAX as u64 {
                        return Err(w.error(a, "gap is a packet count of at least 1"));
                    }
                    link.reorder_gap = n as u32;
                    gap_at = Some(a);
                }
                "loss" | "drop" => link.loss = parse_loss(&mut w, word)?,
                "plr" => {
                    let (a, v) = w.arg(word, "a probability such as 0.01")?;
                    let p = w.unit(a, units::parse_probability(v))?;
                    link.loss = LossConfig::Random {
                        p,
                        correlation: 0.0,
                    };
                }
                "loss-at" => {
                    let (a, v) = w.arg(word, "'arrival' or 'link'")?;
                    link.loss_at = match v {
                        "arrival" => LossAt::Arrival,
                        "link" => LossAt::Link,
                        _ => return Err(w.error(a, "loss-at is 'arrival' or 'link'")),
                    };
                }
                "duplicate" => {
                    link.duplicate = w.percent(word)?;
                    link.duplicate_correlation = w.optional_percent()?.unwrap_or(0.0);
                }
                "corrupt" => {
                    link.corrupt = w.percent(word)?;
                    link.corrupt_correlation = w.optional_percent()?.unwrap_or(0.0);
                }
                "policer" | "police" => {
                    let (a, v) = w.arg(word, "a rate such as 10mbit")?;
                    let rate_bps = w.unit(a, units::parse_rate_bps(v))?;
                    let (b, kw) = w.arg(word, "'burst SIZE'")?;
                    if kw != "burst" {
                        return Err(w.error(b, "expected 'burst SIZE' after the policer rate"));
                    }
                    let (c, size) = w.arg("burst", "a size such as 15kB")?;
                    let burst_bytes = w.unit(c, units::parse_size_bytes(size))?;
                    if burst_bytes == 0 || burst_bytes > MAX_POLICER_BURST_BYTES {
                        return Err(w.error(c, "a policer burst is between 1B and 1GiB"));
                    }
                    link.policer = Some(PolicerConfig {
                        rate_bps,
                        burst_bytes,
                    });
                }
                "seed" => {
                    let (a, v) = w.arg(word, "a whole number")?;
                    spec.seed = Some(w.unit(a, units::parse_count(v))?);
                }
                _ => {
                    return Err(w.error(
                        at,
                        "unknown word (see 'linkem replay --help' for the words linkem reads)",
                    ));
                }
            }
        }

        if let Some(p) = queue_packets {
            link.queue_packets = p;
        }
        if let Some(b) = queue_bytes {
            link.queue_bytes = b;
        }
        if let Some((a, d)) = distribution {
            if d.uses_jitter() && link.jitter_ns == 0 && d != Distribution::Uniform {
                return Err(w.error(
                    a,
                    "a distribution needs a jitter: 'delay D J distribution NAME'",
                ));
            }
            if !d.uses_jitter() && link.jitter_ns != 0 {
                return Err(w.error(a, "a CDF profile gives the delays itself; drop the jitter"));
            }
            link.distribution = Arc::new(d);
        }
        if link.reorder_probability > 0.0 {
            if link.delay_ns == 0 {
                let at = words.iter().position(|x| *x == "reorder").unwrap_or(0);
                return Err(w.error(
                    at,
                    "reordering needs a delay to reorder against (netem refuses it too)",
                ));
            }
            if link.reorder_gap == 0 {
                link.reorder_gap = 1;
            }
        } else if let Some(a) = gap_at {
            return Err(w.error(a, "gap needs 'reorder P%'"));
        }
        Ok(spec)
    }

    /// Parses link words with no distribution files available.
    pub fn parse(text: &str) -> Result<LinkSpec, ConfigError> {
        let words: Vec<&str> = text.split_whitespace().collect();
        Self::parse_words(&words, &mut no_files)
    }
}

fn parse_loss(w: &mut Words<'_>, word: &str) -> Result<LossConfig, ConfigError> {
    let model = w.peek();
    match model {
        Some("gemodel") => {
            w.next += 1;
            let p = w.percent("loss gemodel")?;
            let r = w.optional_percent()?.unwrap_or(1.0 - p);
            let loss_bad = w.optional_percent()?.unwrap_or(1.0);
            let loss_good = w.optional_percent()?.unwrap_or(0.0);
            Ok(LossConfig::GilbertElliott {
                p,
                r,
                loss_bad,
                loss_good,
            })
        }
        Some("state") => {
            w.next += 1;
            let at = w.next;
            let p13 = w.percent("loss state")?;
            let p31 = w.optional_percent()?.unwrap_or(1.0 - p13);
            let p32 = w.optional_percent()?.unwrap_or(0.0);
            let p23 = w.optional_percent()?.unwrap_or(1.0);
            let p14 = w.optional_percent()?.unwrap_or(0.0);
            if p13 + p14 > 1.0 + 1e-12 {
                return Err(w.error(at, "p13 + p14 exceed 100%: they leave state 1 together"));
            }
            if p31 + p32 > 1.0 + 1e-12 {
                return Err(w.error(at, "p31 + p32 exceed 100%: they leave state 3 together"));
            }
            Ok(LossConfig::FourState {
                p13,
                p31,
                p32,
                p23,
                p14,
            })
        }
        Some("ber") => {
            w.next += 1;
            let (a, v) = w.arg("loss ber", "a bit error rate such as 1e-6 or 0.000001")?;
            let ber = parse_ber(v).map_err(|m| w.error(a, m))?;
            Ok(LossConfig::Ber { ber })
        }
        Some("random") => {
            w.next += 1;
            let p = w.percent("loss random")?;
            let correlation = w.optional_percent()?.unwrap_or(0.0);
            Ok(LossConfig::Random { p, correlation })
        }
        _ => {
            let p = w.percent(word)?;
            let correlation = w.optional_percent()?.unwrap_or(0.0);
            Ok(LossConfig::Random { p, correlation })
        }
    }
}

fn parse_ber(v: &str) -> Result<f64, String> {
    let x: f64 = v
        .parse()
        .map_err(|_| format!("'{v}' is not a bit error rate (e.g. 1e-6)"))?;
    if !(0.0..1.0).contains(&x) {
        return Err(format!("a bit error rate is in [0, 1), not {v}"));
    }
    Ok(x)
}

fn pct(p: f64) -> String {
    let v = p * 100.0;
    // Round to 12 significant digits so that 0.07 * 100 prints as 7, not 7.000000000000001.
    let s = format!("{:.10}", v);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}%")
}

impl fmt::Display for LinkConfig {
    /// The canonical words for this link; parsing them gives the same link
    /// (distribution files are shown by name).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some(r) = self.rate_bps {
            parts.push(format!("rate {}", format_rate_bps(r)));
        }
        if self.overhead_bytes != 0 {
            parts.push(format!("overhead {}", self.overhead_bytes));
        }
        match (self.queue_packets, self.queue_bytes) {
            (None, None) => parts.push("queue unlimited".into()),
            (Some(p), None) => parts.push(format!("queue {p}")),
            (None, Some(b)) => parts.push(format!("queue {b}B")),
            (Some(p), Some(b)) => parts.push(format!("limit {p} queue {b}B")),
        }
        if self.delay_ns != 0 || self.jitter_ns != 0 {
            let mut d = format!("delay {}", format_time_ns(self.delay_ns));
            if self.jitter_ns != 0 {
                d += &format!(" {}", format_time_ns(self.jitter_ns));
                if self.delay_correlation != 0.0 {
                    d += &format!(" {}", pct(self.delay_correlation));
                }
            }
            parts.push(d);
        }
        if *self.distribution != Distribution::Uniform {
            parts.push(format!("distribution {}", self.distribution.name()));
        }
        if self.reorder_allow {
            parts.push("reorder allow".into());
        }
        if self.reorder_probability > 0.0 {
            let mut r = format!("reorder {}", pct(self.reorder_probability));
            if self.reorder_correlation != 0.0 {
                r += &format!(" {}", pct(self.reorder_correlation));
            }
            if self.reorder_gap > 1 {
                r += &format!(" gap {}", self.reorder_gap);
            }
            parts.push(r);
        }
        match self.loss {
            LossConfig::None => {}
            LossConfig::Random { p, correlation } => {
                let mut l = format!("loss {}", pct(p));
                if correlation != 0.0 {
                    l += &format!(" {}", pct(correlation));
                }
                parts.push(l);
            }
            LossConfig::Ber { ber } => parts.push(format!("loss ber {ber:e}")),
            LossConfig::GilbertElliott {
                p,
                r,
                loss_bad,
                loss_good,
            } => parts.push(format!(
                "loss gemodel {} {} {} {}",
                pct(p),
                pct(r),
                pct(loss_bad),
                pct(loss_good)
            )),
            LossConfig::FourState {
                p13,
                p31,
                p32,
                p23,
                p14,
            } => parts.push(format!(
                "loss state {} {} {} {} {}",
                pct(p13),
                pct(p31),
                pct(p32),
                pct(p23),
                pct(p14)
            )),
        }
        if self.loss_at == LossAt::Link {
            parts.push("loss-at link".into());
        }
        if self.duplicate > 0.0 {
            let mut s = format!("duplicate {}", pct(self.duplicate));
            if self.duplicate_correlation != 0.0 {
                s += &format!(" {}", pct(self.duplicate_correlation));
            }
            parts.push(s);
        }
        if self.corrupt > 0.0 {
            let mut s = format!("corrupt {}", pct(self.corrupt));
            if self.corrupt_correlation != 0.0 {
                s += &format!(" {}", pct(self.corrupt_correlation));
            }
            parts.push(s);
        }
        if let Some(p) = self.policer {
            parts.push(format!(
                "policer {} burst {}B",
                format_rate_bps(p.rate_bps),
                p.burst_bytes
            ));
        }
        f.write_str(&parts.join(" "))
    }
}

/// Link words read from a TOML file: keys are the words, values their
/// arguments. Tables `a-to-b` and `b-to-a` hold words for one direction only.
///
/// ```toml
/// rate = "10mbit"
/// delay = "20ms 2ms 25%"
/// loss = "gemodel 1% 30%"
/// queue = 100
/// seed = 7
/// [b-to-a]
/// rate = "1mbit"
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TomlWords {
    pub both: Vec<String>,
    pub a_to_b: Vec<String>,
    pub b_to_a: Vec<String>,
}

impl TomlWords {
    pub fn parse(text: &str) -> Result<TomlWords, String> {
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| toml_error(text, &e))?;
        let mut out = TomlWords::default();
        for (key, value) in &table {
            match (key.as_str(), value) {
                ("a-to-b" | "b-to-a", toml::Value::Table(t)) => {
                    let mut words = Vec::new();
                    for (k, v) in t {
                        push_words(&mut words, &format!("{key}.{k}"), k, v)?;
                    }
                    if key == "a-to-b" {
                        out.a_to_b = words;
                    } else {
                        out.b_to_a = words;
                    }
                }
                _ => push_words(&mut out.both, key, key, value)?,
            }
        }
        Ok(out)
    }
}

/// A TOML syntax error as line, column and reason, never the offending line itself:
/// the file may not be a config at all (`--config /etc/shadow`).
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let reason = e.message().trim_end();
    match e.span() {
        Some(span) => {
            let before = &text.as_bytes()[..span.start.min(text.len())];
            let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
            let column = 1 + before.iter().rev().take_while(|&&b| b != b'\n').count();
            format!("line {line}, column {column}: {reason}")
        }
        None => reason.to_string(),
    }
}

fn push_words(
    words: &mut Vec<String>,
    path: &str,
    key: &str,
    value: &toml::Value,
) -> Result<(), String> {
    words.push(key.to_string());
    match value {
        toml::Value::String(s) => {
            if s.split_whitespace().next().is_none() {
                return Err(format!("key '{path}': empty value"));
            }
            words.extend(s.split_whitespace().map(str::to_string));
        }
        toml::Value::Integer(i) if *i >= 0 => words.push(i.to_string()),
        toml::Value::Float(x) if *x >= 0.0 => words.push(x.to_string()),
        toml::Value::Array(items) => {
            for item in items {
                match item {
                    toml::Value::String(s) => {
                        words.extend(s.split_whitespace().map(str::to_string))
                    }
                    toml::Value::Integer(i) if *i >= 0 => words.push(i.to_string()),
                    _ => {
                        return Err(format!(
                            "key '{path}': array items are strings or whole numbers"
                        ))
                    }
                }
            }
        }
        _ => {
            return Err(format!(
                "key '{path}': expected a string such as \"10ms\", a number or an array, found {}",
                value.type_str()
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<LinkConfig, ConfigError> {
        LinkSpec::parse(s).map(|s| s.link)
    }

    #[test]
    fn defaults() {
        let c = parse("").unwrap();
        assert_eq!(c, LinkConfig::default());
        assert_eq!(c.queue_packets, Some(1000));
    }

    #[test]
    fn netem_words() {
        let c = parse("delay 10ms 1ms 25% rate 10mbit limit 50 loss 1% duplicate 2% corrupt 0.1%")
            .unwrap();
        assert_eq!(c.delay_ns, 10_000_000);
        assert_eq!(c.jitter_ns, 1_000_000);
        assert_eq!(c.delay_correlation, 0.25);
        assert_eq!(c.rate_bps, Some(10_000_000));
        assert_eq!(c.queue_packets, Some(50));
        assert_eq!(
            c.loss,
            LossConfig::Random {
                p: 0.01,
                correlation: 0.0
            }
        );
        assert_eq!(c.duplicate, 0.02);
        assert!((c.corrupt - 0.001).abs() < 1e-15);
        let pasted = LinkSpec::parse("netem delay 10ms").unwrap();
        assert_eq!(pasted.link.delay_ns, 10_000_000);
    }

    #[test]
    fn dummynet_words() {
        let c = parse("pipe 1 config bw 3Mbit/s delay 32ms queue 50 plr 0.01").unwrap();
        assert_eq!(c.rate_bps, Some(3_000_000));
        assert_eq!(c.delay_ns, 32_000_000);
        assert_eq!(c.queue_packets, Some(50));
        assert_eq!(
            c.loss,
            LossConfig::Random {
                p: 0.01,
                correlation: 0.0
            }
        );
    }

    #[test]
    fn queue_forms() {
        let c = parse("queue 64KiB").unwrap();
        assert_eq!((c.queue_packets, c.queue_bytes), (None, Some(65536)));
        let c = parse("queue unlimited").unwrap();
        assert_eq!((c.queue_packets, c.queue_bytes), (None, None));
        let c = parse("limit 10 queue 100kB").unwrap();
        assert_eq!((c.queue_packets, c.queue_bytes), (Some(10), Some(100_000)));
        let e = parse("queue 0").unwrap_err();
        assert!(e.message.contains("at least one packet"), "{e}");
    }

    #[test]
    fn loss_models_with_netem_defaults() {
        assert_eq!(
            parse("loss gemodel 1%").unwrap().loss,
            LossConfig::GilbertElliott {
                p: 0.01,
                r: 0.99,
                loss_bad: 1.0,
                loss_good: 0.0
            }
        );
        assert_eq!(
            parse("loss gemodel 1% 10% 70% 0.1%").unwrap().loss,
            LossConfig::GilbertElliott {
                p: 0.01,
                r: 0.1,
                loss_bad: 0.7,
                loss_good: 0.001
            }
        );
        assert_eq!(
            parse("loss state 1%").unwrap().loss,
            LossConfig::FourState {
                p13: 0.01,
                p31: 0.99,
                p32: 0.0,
                p23: 1.0,
                p14: 0.0
            }
        );
        assert_eq!(
            parse("loss ber 1e-6").unwrap().loss,
            LossConfig::Ber { ber: 1e-6 }
        );
        assert_eq!(
            parse("loss random 2% 50%").unwrap().loss,
            LossConfig::Random {
                p: 0.02,
                correlation: 0.5
            }
        );
    }

    #[test]
    fn errors_name_the_word() {
        let e = parse("delay 10ms rate 10mbps").unwrap_err();
        assert_eq!(e.position, 4);
        assert_eq!(e.word, "10mbps");
        assert!(e.to_string().contains("tc reads"), "{e}");
        let e = parse("delay 10").unwrap_err();
        assert_eq!(e.word, "10");
        let e = parse("dealy 10ms").unwrap_err();
        assert_eq!((e.position, e.word.as_str()), (1, "dealy"));
        assert!(e.message.contains("unknown word"));
        let e = parse("rate").unwrap_err();
        assert!(e.message.contains("needs a rate"), "{e}");
        assert!(parse("reorder 10%").unwrap_err().message.contains("delay"));
        assert!(parse("delay 10ms gap 5")
            .unwrap_err()
            .message
            .contains("reorder"));
        assert!(parse("delay 10ms distribution normal")
            .unwrap_err()
            .message
            .contains("jitter"));
        assert!(parse("delay 10ms 1ms distribution nosuch")
            .unwrap_err()
            .message
            .contains("nosuch"));
        assert!(parse("loss 1").unwrap_err().message.contains("%"));
        assert!(parse("policer 1mbit 10kB")
            .unwrap_err()
            .message
            .contains("burst"));
        assert!(parse("loss state 60% 10% 0% 100% 50%").is_err());
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "rate 10mbit overhead 24 queue 50 delay 10ms 1ms 25% distribution normal loss gemodel 1% 10% 70% 0.1%",
            "queue unlimited delay 5ms reorder 25% 50% gap 5 loss 7% 20% loss-at link duplicate 1% corrupt 2% 3%",
            "queue 65536B reorder allow loss state 1% 30% 5% 20% 0.5% policer 2mbit burst 15000B",
            "queue 1000 loss ber 1e-6",
        ] {
            let c = parse(s).unwrap();
            assert_eq!(c.to_string(), s);
            assert_eq!(parse(&c.to_string()).unwrap(), c);
        }
    }

    #[test]
    fn files_come_from_the_loader() {
        let words = ["delay", "10ms", "2ms", "distribution", "my.dist"];
        let spec = LinkSpec::parse_words(&words, &mut |name: &str| {
            assert_eq!(name, "my.dist");
            Ok("-8192 8192".to_string())
        })
        .unwrap();
        assert_eq!(spec.link.distribution.name(), "my.dist");
    }

    #[test]
    fn toml_keys_are_words() {
        let t = TomlWords::parse(
            "rate = \"10mbit\"\ndelay = \"20ms 2ms\"\nqueue = 100\nseed = 7\n[b-to-a]\nrate = \"1mbit\"\n",
        )
        .unwrap();
        let both: Vec<&str> = t.both.iter().map(String::as_str).collect();
        let spec = LinkSpec::parse_words(&both, &mut no_files).unwrap();
        assert_eq!(spec.link.rate_bps, Some(10_000_000));
        assert_eq!(spec.link.jitter_ns, 2_000_000);
        assert_eq!(spec.link.queue_packets, Some(100));
        assert_eq!(spec.seed, Some(7));
        assert_eq!(t.b_to_a, vec!["rate", "1mbit"]);
        assert!(TomlWords::parse("rate = true")
            .unwrap_err()
            .contains("rate"));
        assert!(TomlWords::parse("rate = ").is_err());
        // A file that is not TOML is never echoed back.
        let e = TomlWords::parse("ok = 1\nroot:$6$s3cr3t:19000:0:99999:7:::\n").unwrap_err();
        assert!(
            e.starts_with("line 2, column 5") && !e.contains("s3cr3t"),
            "{e}"
        );
    }
}

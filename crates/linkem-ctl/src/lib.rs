//! The control protocol of a running linkem emulator, shared by the emulator
//! (which serves it on a Unix socket) and `linkem ctl` (which speaks it), so
//! both compile against one definition of the requests and their words.
//!
//! # Protocol (version 1)
//!
//! A stream Unix socket, by default `/run/linkem/NAME.sock`. On connect the
//! emulator sends one banner line:
//!
//! ```text
//! {"linkem":"ctl","protocol":1,"version":"0.1.0","commit":"1a2b3c4","name":"veth-a-veth-b"}
//! ```
//!
//! Then each request is one line of UTF-8 words separated by blanks (at most
//! [`MAX_LINE_BYTES`] bytes with the newline), answered by exactly one JSON
//! line, in order. A request may start with `@ID` (1 to 32 of `A-Z a-z 0-9 _ -`);
//! the reply then carries `"id":"ID"`. A leading `ipfw` or `dnctl` word is
//! ignored, so lines can be pasted from Dummynet scripts.
//!
//! ```text
//! {"ok":true,"at_ns":1234567890123,...}                     success
//! {"ok":false,"error":"...","position":4,"word":"20xs"}     failure: nothing changed
//! ```
//!
//! `position` is the 1-based index of the offending word in the line (the
//! `@ID` and `ipfw` words count), `word` the word itself; both are absent
//! when the error is not about one word. `at_ns` on a change is the instant
//! (CLOCK_REALTIME ns since the epoch, the clock of packet stamps) from which
//! the change applies.
//!
//! | request | effect |
//! |---|---|
//! | `ping`, `version`, `help` | liveness, versions, the list of requests |
//! | `link [a-to-b\|b-to-a\|both] WORDS...` | PATCH: WORDS (linkem's link words, as on the command line) change what they name in one or both (no direction: both) directions; every other word stays. A word that names a default clears: `rate unlimited`, `loss none`, `delay 0ms`, `policer none`, `slot none` |
//! | `replace [a-to-b\|b-to-a\|both] WORDS...` | the link of one or both directions becomes exactly WORDS (unset words take their defaults) |
//! | `show [--json]`, `stats` | links and counters (`stats`: counters only), the shape of `--stats json` |
//! | `list` | the links, their owners and last change |
//! | in a socket of several links (`linkem bridge --pair ... --pair ... --name G`, a lab): `link NAME ...`, `replace NAME ...`, `show NAME [--json]`, `stats NAME` | the same for link NAME (`r1:eth1--r2:eth1`, `IF_A-IF_B`); `show`, `stats`, `list` alone: every link, each object with `"link":NAME`; a batch may change several links; `zero` and `watch` cover all |
//! | `zero` | counters seen by `show`/`stats`/`watch` start again from zero (the metrics endpoint's counters never go back) |
//! | `watch [INTERVAL]` | one `stats` line every INTERVAL (default 1s, 10ms..1h) until the client sends a line or closes |
//! | `begin` ... `commit` / `abort` | a batch: each line is checked and answered `{"ok":true,"batched":N}`; `commit` applies all at one instant, or none if any line failed |
//! | `pipe\|queue\|sched N config WORDS` | Dummynet objects |
//! | `pipe\|queue\|sched [N] show`, `pipe\|queue\|sched N delete` | |
//! | `add [NUM] ACTION ...`, `delete NUM...`, `flush`, `set one-pass on\|off` | ipfw rules |
//! | `claim udp\|tcp PORT[-PORT] [-- WORDS] [--a-to-b\|--in WORDS] [--b-to-a\|--out WORDS]` | the asker's own pipe per direction for the ports (an emulator running rules with `--claims`); again: changed in place and renewed; `claim ... release`, `release udp\|tcp PORT[-PORT]` frees them; reply `{"ok":true,"at_ns":...,"claim":"udp 5678","event":"claimed\|changed\|renewed\|released","pipes":[A,B],"expires_ns":...}` |
//! | `claims` | the asker's claims (root's: all) with each pipe's packets, bytes and drops |
//!
//! The Dummynet and ipfw requests are parsed here and checked by the
//! emulator against a copy of its whole rule set (a batch as a whole): a
//! `linkem bridge --rules FILE` applies them to its running node between two
//! packets (pipes keep their queued packets and release times). There `show`
//! and `list` give the rules with owners and packet/byte counters (`text`: the
//! `ipfw -a list` layout), `pipe [N] show` the pipes and flows (`text`: the
//! `ipfw pipe show` layout), `queue|sched [N] show` the objects' config lines
//! and the queues and flows under them (`queues`/`scheds`, `schedulers`);
//! with N only object N, an unknown N an error naming it; and `link`
//! requests are refused. Every pipe,
//! queue, scheduler and rule belongs to the uid that created it; only it or
//! root may change or delete it. An emulator without a rule set (a plain
//! `linkem bridge`) answers them with the error [`NO_RULE_SET`] and changes
//! nothing.
//!
//! # Invariants
//! - Parsing is pure: no I/O except through the distribution loader the caller
//!   passes, no panics on any input (fuzzed by `fuzz/fuzz_targets/ctl.rs`).
//! - A request that parses is complete: the emulator needs no further checks
//!   of its words, only of who asks (ownership) and of what exists; but a
//!   `link` (PATCH), each word checked here, is checked as a whole link once
//!   laid over the running one (`linkem_core::LinkSpec::patch`: a
//!   `distribution` needs the jitter the link has), its errors naming the
//!   word at its place in the line.

#![forbid(unsafe_code)]

use linkem_core::model::Change;
use linkem_core::rules::{ObjectDef, ObjectKind, Rule};
use linkem_core::LinkConfig;
use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};

mod client;
mod parse;

pub use client::Client;
pub use parse::{parse_line, parse_line_for, parse_line_named};

/// Protocol version in the banner; bumped when a reply changes incompatibly.
pub const PROTOCOL_VERSION: u32 = 1;
/// Longest request line, newline included: longer lines are refused whole.
pub const MAX_LINE_BYTES: usize = 4096;
/// Lines one batch (`begin` .. `commit`) may hold, and bytes of request
/// text (newlines not counted): what an emulator keeps per connection, so
/// a client cannot make it hold more than this.
pub const MAX_BATCH_LINES: usize = 10_000;
pub const MAX_BATCH_BYTES: usize = 1 << 20;
/// Longest reply line a client reads, newline included (64 MiB, far above
/// `show` of the largest rule set): a longer one is an error, not memory
/// filled by a broken or hostile peer. The Python client keeps the same cap.
pub const MAX_REPLY_BYTES: usize = 64 << 20;
/// Where emulators put their sockets by default.
pub const SOCKET_DIR: &str = "/run/linkem";
/// The error of every pipe, queue, scheduler and rule request in an emulator
/// that does not run a rule set.
pub const NO_RULE_SET: &str = "no rule set in this emulator: pipe, queue, sched, add, delete, \
     flush and set take effect only in an emulator that runs ipfw rules; \
     change its links with 'link a-to-b|b-to-a|both WORDS'";
/// The error of a change to one link of a socket that serves several
/// without naming it (the names follow).
pub const NAME_A_LINK: &str = "this socket serves several links: name one first \
     (link NAME [a-to-b|b-to-a|both] WORDS)";
/// Shortest and longest `watch` interval.
pub const WATCH_MIN_NS: u64 = 10_000_000;
pub const WATCH_MAX_NS: u64 = 3_600_000_000_000;

/// The default socket of the emulator named `name`.
pub fn default_socket_path(name: &str) -> PathBuf {
    Path::new(SOCKET_DIR).join(format!("{name}.sock"))
}

/// The name of a `linkem bridge IF_A IF_B` started without `--name`.
pub fn default_name(if_a: &str, if_b: &str) -> String {
    format!("{if_a}-{if_b}")
}

/// Where `linkem bridge IF_A IF_B ARGS` puts its control socket, read from
/// its options as it reads them (`--control PATH|none`, else `--name NAME`,
/// else the interfaces' names; the last of each counts); None with
/// `--control none`.
pub fn bridge_socket_path<S: AsRef<str>>(args: &[S], if_a: &str, if_b: &str) -> Option<PathBuf> {
    let (mut control, mut name) = (None, None);
    let mut words = args.iter().map(AsRef::as_ref);
    while let Some(w) = words.next() {
        let mut value = |flag: &str| match w.strip_prefix(flag) {
            Some("") => words.next().map(str::to_string),
            Some(v) => v.strip_prefix('=').map(str::to_string),
            None => None,
        };
        if let Some(v) = value("--control") {
            control = Some(v);
        } else if let Some(v) = value("--name") {
            name = Some(v);
        }
    }
    match control.as_deref() {
        Some("none") => None,
        Some(p) => Some(PathBuf::from(p)),
        None => Some(default_socket_path(
            &name.unwrap_or_else(|| default_name(if_a, if_b)),
        )),
    }
}

/// Which default link a `link` request changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    AToB,
    BToA,
    Both,
}

impl Dir {
    /// Indices of the directions (0 = a->b, 1 = b->a).
    pub fn indices(self) -> &'static [usize] {
        match self {
            Dir::AToB => &[0],
            Dir::BToA => &[1],
            Dir::Both => &[0, 1],
        }
    }
}

/// Dummynet object kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pipe,
    Queue,
    Sched,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pipe => "pipe",
            Kind::Queue => "queue",
            Kind::Sched => "sched",
        }
    }

    /// The rule file's name of the kind.
    pub fn object(self) -> ObjectKind {
        match self {
            Kind::Pipe => ObjectKind::Pipe,
            Kind::Queue => ObjectKind::Queue,
            Kind::Sched => ObjectKind::Sched,
        }
    }
}

/// A pipe, queue, scheduler or rule request (see [`NO_RULE_SET`]), parsed
/// by the rule file's own entry points ([`linkem_core::rules::parse_object`],
/// [`linkem_core::rules::parse_rule`]): what reaches the emulator is typed,
/// checked there only against what runs (owners, what exists).
#[derive(Debug, Clone, PartialEq)]
pub enum RuleRequest {
    /// `pipe N config WORDS`: the object's whole definition.
    Config {
        kind: Kind,
        number: u32,
        def: Box<ObjectDef>,
    },
    Show {
        kind: Kind,
        number: Option<u32>,
    },
    Delete {
        kind: Kind,
        number: u32,
    },
    /// `add [NUM] ...`: the rule, parsed; without NUM it is numbered 0
    /// until the emulator numbers it ([`Rule::numbered`]).
    Add {
        number: Option<u32>,
        rule: Box<Rule>,
    },
    DeleteRules {
        numbers: Vec<u32>,
    },
    Flush,
    OnePass(bool),
}

impl RuleRequest {
    /// The change the request makes, as the model takes it; None for a
    /// show and for a rule not yet numbered (the emulator numbers it from
    /// the rules it runs). Its [`Change`]'s `Display` is a line that parses
    /// back to the same request.
    pub fn change(&self) -> Option<Change> {
        Some(match self {
            RuleRequest::Config { def, .. } => Change::Object(def.clone()),
            RuleRequest::Delete { kind, number } => Change::DeleteObject {
                kind: kind.object(),
                number: *number,
            },
            RuleRequest::Add {
                number: Some(_),
                rule,
            } => Change::AddRule(rule.clone()),
            RuleRequest::DeleteRules { numbers } => Change::DeleteRules(numbers.clone()),
            RuleRequest::Flush => Change::Flush,
            RuleRequest::OnePass(on) => Change::OnePass(*on),
            RuleRequest::Show { .. } | RuleRequest::Add { number: None, .. } => return None,
        })
    }
}

/// One parsed request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Ping,
    Version,
    Help,
    /// `link [NAME] [DIR] WORDS` (PATCH: the words change only what they
    /// name) or `replace [NAME] [DIR] WORDS` (the direction becomes exactly
    /// the words).
    Link {
        /// The link a socket of several links serves ([`parse_line_named`]);
        /// None in a socket of one link.
        target: Option<String>,
        dir: Dir,
        /// `replace`: the whole link; `link`: the words over the running one.
        replace: bool,
        /// The words read alone over the defaults: what a `replace` sets;
        /// None for a `link` whose words need the running link to be
        /// complete (a `distribution` over its jitter).
        link: Option<Box<LinkConfig>>,
        /// The words as given, for `list` and the audit log.
        words: Vec<String>,
        /// 1-based position of the first of `words` in the line, so that an
        /// error of the words over the running link names its place.
        first: usize,
    },
    /// `show [NAME] [--json]`: one link of a socket of several, or all.
    Show {
        target: Option<String>,
    },
    /// `stats [NAME]`.
    Stats {
        target: Option<String>,
    },
    List,
    Zero,
    Watch {
        interval_ns: u64,
    },
    Begin,
    Commit,
    Abort,
    Rule(RuleRequest),
    /// `claim ...` / `release ...`: a port's own pipes (see [`ClaimRequest`]).
    Claim(ClaimRequest),
    /// `claims`: the asker's claims (root's: all) with their counters.
    Claims,
}

/// The transport a claim selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proto {
    Udp,
    Tcp,
}

impl Proto {
    pub fn word(self) -> &'static str {
        match self {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        }
    }
}

/// What a claim request asks.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimAction {
    /// Take the ports (or renew them); `words[0]` the a-to-b pipe's words,
    /// `words[1]` the b-to-a pipe's, each `None` when the request gave
    /// none for it (a new claim's pipe then takes no words; a claim held
    /// keeps that pipe as it is). Each is a whole `pipe N config` line's
    /// words, checked here by the rule file's own parser.
    Set { words: [Option<Vec<String>>; 2] },
    /// `claim ... release` or `release ...`: give the ports back.
    Release,
}

/// `claim udp|tcp PORT[-PORT] [release] [-- WORDS] [--a-to-b|--in WORDS]
/// [--b-to-a|--out WORDS]`, `release udp|tcp PORT[-PORT]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimRequest {
    pub proto: Proto,
    /// First and last port, first <= last.
    pub ports: (u16, u16),
    pub action: ClaimAction,
}

impl Request {
    /// Whether the request asks to change state (audited; allowed in a batch).
    pub fn is_change(&self) -> bool {
        match self {
            Request::Link { .. } | Request::Zero => true,
            Request::Rule(RuleRequest::Show { .. }) => false,
            Request::Rule(_) => true,
            Request::Begin | Request::Commit | Request::Abort => true,
            // Audited on their own, never part of a batch.
            Request::Claim(_) | Request::Claims => false,
            _ => false,
        }
    }
}

/// A request with its optional id.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub id: Option<String>,
    pub request: Request,
}

/// Why a line was refused: the 1-based word position, the word, the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ParseError {
    pub position: Option<usize>,
    pub word: Option<String>,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.position, &self.word) {
            (Some(p), Some(w)) => write!(f, "word {p} '{w}': {}", self.message),
            _ => f.write_str(&self.message),
        }
    }
}

impl ParseError {
    fn general(message: impl Into<String>) -> Self {
        ParseError {
            position: None,
            word: None,
            message: message.into(),
        }
    }

    /// Adds the id (if any) to a failure reply.
    pub fn reply(&self, id: Option<&str>) -> serde_json::Value {
        let mut v = serde_json::json!({ "ok": false, "error": self.message });
        if let (Some(p), Some(w)) = (self.position, &self.word) {
            v["position"] = p.into();
            v["word"] = w.as_str().into();
        }
        if let Some(id) = id {
            v["id"] = id.into();
        }
        v
    }
}

/// The system's netem tables by bare name (`/usr/lib/tc/NAME.dist`): the
/// only files a control request may make the emulator read, so a client
/// cannot probe the file system of a process that may run as root.
pub fn system_tables(name: &str) -> Result<String, String> {
    let plain = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !plain {
        return Err(format!(
            "'{name}': over the control socket only the files the rule file named, built-in \
             names and the system's tables by bare name (/usr/lib/tc/NAME.dist) are read"
        ));
    }
    for dir in ["/usr/lib/tc", "/usr/lib64/tc", "/usr/local/lib/tc"] {
        if let Ok(text) = std::fs::read_to_string(format!("{dir}/{name}.dist")) {
            return Ok(text);
        }
    }
    Err(format!("'{name}': no such table (/usr/lib/tc/{name}.dist)"))
}

/// The text of `help`.
pub const HELP: &str = "\
ping | version | help
link [a-to-b|b-to-a|both] WORDS...
                                   WORDS change what they name, the rest stays (no direction:
                                   both); clear with rate unlimited, loss none, delay 0ms...
replace [a-to-b|b-to-a|both] WORDS...
                                   the link becomes exactly WORDS (unset words: defaults)
show [--json] | stats | list       links and counters | counters | links and owners
link|replace NAME ..., show NAME [--json], stats NAME
                                   in a socket of several links (a lab, --pair ... --name G):
                                   link NAME (show, stats, list alone: every link)
zero                               counters of show/stats/watch restart from zero
watch [INTERVAL]                   a stats line every INTERVAL (default 1s) until a line is sent
begin ... commit | abort           a batch, applied all at one instant or not at all
pipe|queue|sched N config WORDS, pipe|queue|sched [N] show, pipe|queue|sched N delete,
add [NUM] ACTION ..., delete NUM..., flush, set one-pass on|off
                                   Dummynet/ipfw words for a bridge running --rules
                                   (elsewhere: 'no rule set in this emulator');
                                   'pipe N config' sets the whole pipe
claim udp|tcp PORT[-PORT] [-- WORDS] [--a-to-b|--in WORDS] [--b-to-a|--out WORDS]
                                   your own pipe per direction for the ports (pipe words);
                                   again: changes and renews it
claim udp|tcp PORT[-PORT] release, release udp|tcp PORT[-PORT]
                                   gives the ports back
claims                             your claims and their counters (root: everyone's)
A line may start with @ID (echoed as \"id\" in the reply).";

/// Reads one reply line of at most [`MAX_REPLY_BYTES`] (newline included)
/// from `r`, without its newline. `Ok(None)` at the end of the stream; a
/// longer line is an `InvalidData` error once the cap is read.
pub fn read_reply_line<R: BufRead>(r: &mut R) -> std::io::Result<Option<String>> {
    read_line_capped(r, MAX_REPLY_BYTES)
}

fn read_line_capped<R: BufRead>(r: &mut R, max_bytes: usize) -> std::io::Result<Option<String>> {
    use std::io::Read;
    let mut buf = Vec::new();
    let n = r.take(max_bytes as u64).read_until(b'\n', &mut buf)?;
    if n == 0 {
        return Ok(None);
    }
    if !buf.ends_with(b"\n") && n == max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a reply line longer than {max_bytes} bytes"),
        ));
    }
    while buf.ends_with(b"\n") || buf.ends_with(b"\r") {
        buf.pop();
    }
    String::from_utf8(buf).map(Some).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "a reply line is not UTF-8")
    })
}

#[cfg(test)]
mod tests;

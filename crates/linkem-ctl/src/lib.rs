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
//! | `link [a-to-b\|b-to-a\|both] WORDS...` | the link of one or both (no direction: both) directions becomes exactly WORDS (linkem's link words, as on the command line; unset words take their defaults) |
//! | `show [--json]`, `stats` | links and counters (`stats`: counters only), the shape of `--stats json` |
//! | `list` | the links, their owners and last change |
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
//!   of its words, only of who asks (ownership) and of what exists.

#![forbid(unsafe_code)]

use linkem_core::config::FileLoader;
use linkem_core::model::Change;
use linkem_core::rules::{parse_object, parse_rule, ObjectDef, ObjectKind, Rule, RulesError};
use linkem_core::units::parse_time_or_bare_ns;
use linkem_core::{LinkConfig, LinkSpec};
use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};

mod client;
pub use client::Client;

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
/// Shortest and longest `watch` interval.
pub const WATCH_MIN_NS: u64 = 10_000_000;
pub const WATCH_MAX_NS: u64 = 3_600_000_000_000;

/// The default socket of the emulator named `name`.
pub fn default_socket_path(name: &str) -> PathBuf {
    Path::new(SOCKET_DIR).join(format!("{name}.sock"))
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
    Link {
        dir: Dir,
        link: Box<LinkConfig>,
        /// The words as given, for `list` and the audit log.
        words: Vec<String>,
    },
    Show,
    Stats,
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

/// Words of a line with their 1-based positions in it.
struct Cursor<'a> {
    words: &'a [&'a str],
    next: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.words.get(self.next).copied()
    }

    fn take(&mut self) -> Option<&'a str> {
        let w = self.peek()?;
        self.next += 1;
        Some(w)
    }

    fn at(&self, index: usize, message: impl Into<String>) -> ParseError {
        let index = index.min(self.words.len().saturating_sub(1));
        ParseError {
            position: Some(index + 1),
            word: self.words.get(index).map(|w| w.to_string()),
            message: message.into(),
        }
    }

    /// An error at the word just taken (or the last word, if the line ended).
    fn here(&self, message: impl Into<String>) -> ParseError {
        self.at(self.next.saturating_sub(1), message)
    }

    fn rest(&mut self) -> Vec<String> {
        let r = self.words[self.next..]
            .iter()
            .map(|w| w.to_string())
            .collect();
        self.next = self.words.len();
        r
    }

    /// The rule parser's error for `words`, which start at index `first`
    /// of the line: the word it refused and its position, from the parse.
    fn rules_error(&self, first: usize, words: &[&str], e: RulesError) -> ParseError {
        match e.position_in(words) {
            Some(i) => ParseError {
                position: Some(first + i + 1),
                word: Some(words[i].to_string()),
                message: e.message,
            },
            // A word the parser made up (a number it printed) or one
            // missing at the end: the message names it.
            None if e.word.is_empty() => ParseError::general(e.message),
            None => ParseError::general(format!("'{}': {}", e.word, e.message)),
        }
    }

    fn end(&self, what: &str) -> Result<(), ParseError> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.at(self.next, format!("unexpected word after {what}"))),
        }
    }
}

/// Object and rule numbers, as ipfw/dnctl take them.
const MAX_NUMBER: u32 = 65535;

fn number(c: &mut Cursor<'_>, what: &str) -> Result<u32, ParseError> {
    let w = c
        .take()
        .ok_or_else(|| c.here(format!("{what} number missing")))?;
    // The rule file's reading (decimal, as ipfw's atoi), so that a number
    // names the same object here as in a file and in a rule's `pipe N`.
    match linkem_core::rules::parse_decimal(w) {
        Some(n) if (1..=u64::from(MAX_NUMBER)).contains(&n) => Ok(n as u32),
        _ => Err(c.here(format!("{what} number must be 1..{MAX_NUMBER}, in decimal"))),
    }
}

fn is_number(w: &str) -> bool {
    !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit())
}

/// ipfw rule actions a rule body may start with.
const ACTIONS: &[&str] = &[
    "allow",
    "accept",
    "pass",
    "permit",
    "deny",
    "drop",
    "reject",
    "unreach",
    "unreach6",
    "reset",
    "count",
    "skipto",
    "pipe",
    "queue",
    "check-state",
];

fn valid_id(id: &str) -> bool {
    (1..=32).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
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

/// Parses one request line (without its newline). `files` reads netem
/// tables named by `distribution` (pass [`system_tables`] or
/// `linkem_core::config::no_files`).
pub fn parse_line(line: &str, files: &mut FileLoader<'_>) -> Result<Line, ParseError> {
    parse_line_for(line, files, ["a", "b"])
}

/// [`parse_line`] for an emulator whose interfaces are named `sides` (what
/// a rule's `recv`/`xmit`/`via` name besides `a` and `b`).
pub fn parse_line_for(
    line: &str,
    files: &mut FileLoader<'_>,
    sides: [&str; 2],
) -> Result<Line, ParseError> {
    if line.len() >= MAX_LINE_BYTES {
        return Err(ParseError::general(format!(
            "line longer than {} bytes",
            MAX_LINE_BYTES - 1
        )));
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut c = Cursor {
        words: &words,
        next: 0,
    };
    let mut id = None;
    if let Some(w) = c.peek() {
        if let Some(rest) = w.strip_prefix('@') {
            c.next += 1;
            if !valid_id(rest) {
                return Err(c.here("an id is 1 to 32 of A-Z a-z 0-9 _ -"));
            }
            id = Some(rest.to_string());
        }
    }
    if matches!(c.peek(), Some("ipfw" | "dnctl")) {
        c.next += 1;
    }
    let request = parse_request(&mut c, files, sides)?;
    Ok(Line { id, request })
}

fn parse_request(
    c: &mut Cursor<'_>,
    files: &mut FileLoader<'_>,
    sides: [&str; 2],
) -> Result<Request, ParseError> {
    let Some(verb) = c.take() else {
        return Err(ParseError::general("empty request (try 'help')"));
    };
    let simple = |c: &Cursor<'_>, r: Request| c.end(verb).map(|_| r);
    match verb {
        "ping" => simple(c, Request::Ping),
        "version" => simple(c, Request::Version),
        "help" => simple(c, Request::Help),
        "stats" => simple(c, Request::Stats),
        "zero" => simple(c, Request::Zero),
        "begin" => simple(c, Request::Begin),
        "commit" => simple(c, Request::Commit),
        "abort" => simple(c, Request::Abort),
        "flush" => simple(c, Request::Rule(RuleRequest::Flush)),
        "claims" => simple(c, Request::Claims),
        "claim" | "release" => claim_request(c, verb == "release", files).map(Request::Claim),
        "show" | "list" => {
            if c.peek() == Some("--json") {
                c.next += 1;
            }
            c.end(verb)?;
            Ok(if verb == "show" {
                Request::Show
            } else {
                Request::List
            })
        }
        "watch" => watch_request(c),
        "link" => link_request(c, files),
        "pipe" | "queue" | "sched" => {
            let kind = match verb {
                "pipe" => Kind::Pipe,
                "queue" => Kind::Queue,
                _ => Kind::Sched,
            };
            object_request(c, kind, files).map(Request::Rule)
        }
        "add" => add_request(c, sides),
        "delete" => {
            let mut numbers = Vec::new();
            while c.peek().is_some() {
                numbers.push(number(c, "rule")?);
            }
            if numbers.is_empty() {
                return Err(c.here("'delete' needs rule numbers (or 'flush' for all)"));
            }
            Ok(Request::Rule(RuleRequest::DeleteRules { numbers }))
        }
        "set" => {
            match c.take() {
                Some("one-pass") => {}
                Some(_) => return Err(c.here("only 'set one-pass on|off' is known")),
                None => return Err(c.here("'set' needs 'one-pass on|off'")),
            }
            let on = match c.take() {
                Some("on") => true,
                Some("off") => false,
                _ => return Err(c.here("'set one-pass' takes on or off")),
            };
            c.end("on|off")?;
            Ok(Request::Rule(RuleRequest::OnePass(on)))
        }
        _ => Err(c.here("unknown request (try 'help')")),
    }
}

/// `watch [INTERVAL]`: a bare number is seconds; 10ms..1h, 1 s when not given.
fn watch_request(c: &mut Cursor<'_>) -> Result<Request, ParseError> {
    let interval_ns = match c.take() {
        None => 1_000_000_000,
        Some(w) => {
            // The one time syntax; a bare number is seconds, as before units.
            let ns = parse_time_or_bare_ns(w, "s").map_err(|e| c.here(e.0))?;
            if !(WATCH_MIN_NS..=WATCH_MAX_NS).contains(&ns) {
                return Err(c.here("watch interval must be 10ms..1h"));
            }
            ns
        }
    };
    c.end("the interval")?;
    Ok(Request::Watch { interval_ns })
}

/// `link [a-to-b|b-to-a|both] WORDS`: the link's words, without a seed.
fn link_request(c: &mut Cursor<'_>, files: &mut FileLoader<'_>) -> Result<Request, ParseError> {
    // Without a direction the words apply to both, as they do on
    // `linkem bridge`'s command line and in the Python client's link("both", ...).
    let dir =
        match c.peek() {
            Some("a-to-b" | "a->b") => Dir::AToB,
            Some("b-to-a" | "b->a") => Dir::BToA,
            Some("both") => Dir::Both,
            Some(_) => Dir::Both,
            None => return Err(c.here(
                "'link' needs words, after a direction (a-to-b, b-to-a or both) or alone for both",
            )),
        };
    if matches!(
        c.peek(),
        Some("a-to-b" | "a->b" | "b-to-a" | "b->a" | "both")
    ) {
        c.take();
    }
    let first = c.next;
    let words = &c.words[first..];
    let spec =
        LinkSpec::parse_words(words, files).map_err(|e| c.at(first + e.position - 1, e.message))?;
    if spec.seed.is_some() {
        let at = words.iter().position(|w| *w == "seed").unwrap_or(0);
        return Err(c.at(
            first + at,
            "the seed is fixed when the emulator starts (a change keeps the random streams)",
        ));
    }
    let words = c.rest();
    Ok(Request::Link {
        dir,
        link: Box::new(spec.link),
        words,
    })
}

/// `add [N] [set N] [prob X] ACTION ...`: the rule, read as a rule file reads it.
fn add_request(c: &mut Cursor<'_>, sides: [&str; 2]) -> Result<Request, ParseError> {
    let number = match c.peek() {
        Some(w) if is_number(w) => Some(number(c, "rule")?),
        _ => None,
    };
    let body = c.next;
    // Optional `set N` and `prob X` come before the action.
    let mut at = body;
    while let Some("set" | "prob") = c.words.get(at).copied() {
        at += 2;
    }
    match c.words.get(at) {
        None => return Err(c.here("'add' needs a rule: add [NUM] ACTION ...")),
        Some(a) if !ACTIONS.contains(a) => {
            return Err(c.at(
                at,
                format!("unknown action (one of {})", ACTIONS.join(", ")),
            ))
        }
        Some(_) => {}
    }
    let words = &c.words[body..];
    let rule = parse_rule(number, words, 1, sides).map_err(|e| c.rules_error(body, words, e))?;
    c.next = c.words.len();
    Ok(Request::Rule(RuleRequest::Add {
        number,
        rule: Box::new(rule),
    }))
}

/// `pipe N config ...`, `pipe [N] show|list`, `pipe N delete`, `pipe delete N`.
fn object_request(
    c: &mut Cursor<'_>,
    kind: Kind,
    files: &mut FileLoader<'_>,
) -> Result<RuleRequest, ParseError> {
    let what = kind.name();
    match c.peek() {
        Some("show" | "list") => {
            c.next += 1;
            let number = match c.peek() {
                Some("--json") | None => None,
                Some(_) => Some(number(c, what)?),
            };
            if c.peek() == Some("--json") {
                c.next += 1;
            }
            c.end("show")?;
            Ok(RuleRequest::Show { kind, number })
        }
        Some("delete") => {
            c.next += 1;
            let number = number(c, what)?;
            c.end("the number")?;
            Ok(RuleRequest::Delete { kind, number })
        }
        Some(_) => {
            let number = number(c, what)?;
            match c.take() {
                Some("config") => {
                    let first = c.next;
                    let words = &c.words[first..];
                    let def = parse_object(kind.object(), number, words, 1, files)
                        .map_err(|e| c.rules_error(first, words, e))?;
                    c.next = c.words.len();
                    Ok(RuleRequest::Config {
                        kind,
                        number,
                        def: Box::new(def),
                    })
                }
                Some("show" | "list") => {
                    if c.peek() == Some("--json") {
                        c.next += 1;
                    }
                    c.end("show")?;
                    Ok(RuleRequest::Show {
                        kind,
                        number: Some(number),
                    })
                }
                Some("delete") => {
                    c.end("delete")?;
                    Ok(RuleRequest::Delete { kind, number })
                }
                Some(_) => Err(c.here(format!("{what} N takes config, show or delete"))),
                None => Err(c.here(format!("{what} N needs config, show or delete"))),
            }
        }
        None => Err(c.here(format!("'{what}' needs N config|show|delete, or show"))),
    }
}

/// A claim's protocol and ports: `udp|tcp PORT[-PORT]`.
fn claim_ports(c: &mut Cursor<'_>) -> Result<(Proto, (u16, u16)), ParseError> {
    let proto = match c.take() {
        Some("udp") => Proto::Udp,
        Some("tcp") => Proto::Tcp,
        Some(_) => return Err(c.here("a claim names udp or tcp")),
        None => return Err(c.here("a claim needs udp|tcp PORT[-PORT]")),
    };
    let Some(w) = c.take() else {
        return Err(c.here("a claim needs a port after its protocol: PORT or FIRST-LAST"));
    };
    let port = |s: &str| match linkem_core::rules::parse_decimal(s) {
        Some(n) if (1..=65535).contains(&n) => Some(n as u16),
        _ => None,
    };
    let ports = match w.split_once('-') {
        None => port(w).map(|p| (p, p)),
        Some((a, b)) => port(a).zip(port(b)),
    };
    match ports {
        Some((a, b)) if a <= b => Ok((proto, (a, b))),
        Some(_) => Err(c.here("a port range goes from the lower port to the higher")),
        None => Err(c.here("a port is 1..65535 in decimal (a range: FIRST-LAST)")),
    }
}

/// Marks that start a claim's pipe words: both directions, side a's
/// (`a-to-b`, what a host receives), side b's (`b-to-a`, what it sends).
fn claim_mark(w: &str) -> Option<usize> {
    match w {
        "--" => Some(2),
        "--a-to-b" | "--in" => Some(0),
        "--b-to-a" | "--out" => Some(1),
        _ => None,
    }
}

/// `claim udp|tcp PORT[-PORT] ...` and `release udp|tcp PORT[-PORT]`.
fn claim_request(
    c: &mut Cursor<'_>,
    release: bool,
    files: &mut FileLoader<'_>,
) -> Result<ClaimRequest, ParseError> {
    let (proto, ports) = claim_ports(c)?;
    if release || c.peek() == Some("release") {
        if !release {
            c.next += 1;
        }
        c.end("release")?;
        return Ok(ClaimRequest {
            proto,
            ports,
            action: ClaimAction::Release,
        });
    }
    // Words right after the ports count as after `--`.
    let mut spans: [Option<(usize, usize)>; 3] = [None; 3];
    let (mut current, mut first, mut marked) = (2, c.next, false);
    for i in c.next..=c.words.len() {
        let mark = c.words.get(i).and_then(|w| claim_mark(w));
        if i < c.words.len() && mark.is_none() {
            continue;
        }
        // The segment [first, i) ends: an empty one counts only when marked.
        if marked || i > first {
            spans[current] = Some((first, i));
        }
        if let Some(m) = mark {
            if spans[m].is_some() {
                return Err(c.at(
                    i,
                    "each of --, --a-to-b (--in) and --b-to-a (--out) comes once",
                ));
            }
            (current, first, marked) = (m, i + 1, true);
        }
    }
    c.next = c.words.len();
    let mut words: [Option<Vec<String>>; 2] = [None, None];
    for (dir, w) in words.iter_mut().enumerate() {
        let Some((first, end)) = spans[dir].or(spans[2]) else {
            continue;
        };
        let slice = &c.words[first..end];
        // The rule file's parser checks them, for pipe 1: the emulator
        // parses them again for the pipe it gives the claim.
        parse_object(ObjectKind::Pipe, 1, slice, 1, files)
            .map_err(|e| c.rules_error(first, slice, e))?;
        *w = Some(slice.iter().map(|s| s.to_string()).collect());
    }
    Ok(ClaimRequest {
        proto,
        ports,
        action: ClaimAction::Set { words },
    })
}

/// The text of `help`.
pub const HELP: &str = "\
ping | version | help
link [a-to-b|b-to-a|both] WORDS...
                                   the link becomes exactly WORDS (no direction: both)
show [--json] | stats | list       links and counters | counters | links and owners
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

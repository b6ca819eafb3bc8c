//! Parsing of rule files: `pipe N config ...`, `add ...`, `set one-pass off`.
//!
//! Every word is either understood or refused with its line and the word:
//! words of real ipfw/dnctl that linkem does not model say "not supported",
//! anything else says "unknown". Hostnames are refused (the core does no name
//! lookups): rules take addresses.
//!
//! # One reading for every front end
//! [`statements`] reads the first words of each line (the command, the
//! object or rule number, `flush`, one-pass) for the parser and for the
//! bridge's control plane alike, and every number that names a thing goes
//! through [`parse_decimal`]: rule numbers, `pipe|queue|sched N config`, a
//! rule's `pipe N`/`queue N`/`skipto N` and a queue's `pipe M`/`sched M` are
//! decimal (ipfw reads the first four with atoi or strtoul(…, 10); it reads a
//! queue's `pipe M` with strtoul(…, 0), which linkem does not follow, so that
//! `010` names pipe 10 wherever it stands). Values — masks, weights, sizes,
//! ports — take strtoul(…, 0)'s syntax (`0x` hex, leading-0 octal) as ipfw
//! does. A control plane that renders a rule set back to text writes object
//! and rule numbers in decimal and rule bodies as written, so the text parses
//! to the same set: parse(render(parse(x))) = parse(x).

use super::flow::v4_mapped;
use crate::pipe::{FileReader, PipeDef};
use crate::rulefile::{object_number, parse_number, rerr};
pub use crate::rulefile::{parse_decimal, RulesError, WordAt};
use crate::sched::words::{PipeSched, QueueDef, SchedDef};
use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, Ipv6Addr};

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `pipe N`: send the packet through pipe N (which the file must
    /// configure with `pipe N config`).
    Pipe(u32),
    /// `queue N`: a queue under a scheduler ([`crate::sched`]).
    Queue(u32),
    /// `allow` (`accept`, `pass`, `permit`): pass unimpaired; the rules stop.
    Allow,
    /// `deny` (`drop`): drop the packet (`denied`); the rules stop.
    Deny,
    /// `count`: count the packet in this rule's counters and go on with the
    /// next rule.
    Count,
    /// `skipto N`: go on at the first rule numbered ≥ N (N is above the
    /// rule's own number: jumps only go forward).
    Skipto(u32),
}

/// An address range: an IPv4 network (as mapped addresses) or an IPv6 one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Net {
    /// Lowest address in the range (inclusive), as a 128-bit number; IPv4 in
    /// mapped form ([`v4_mapped`]).
    pub lo: u128,
    /// Highest address in the range (inclusive), as `lo`.
    pub hi: u128,
    /// An IPv6 network; false: an IPv4 one.
    pub v6: bool,
}

impl Net {
    /// Whether `addr` (of IP version `version`, 4 or 6; in the form of
    /// [`crate::rules::FlowKey::src_ip`]) lies in the range; an IPv4 network
    /// never holds an IPv6 address, nor the reverse.
    #[inline]
    pub fn contains(&self, version: u8, addr: u128) -> bool {
        (version == 6) == self.v6 && self.lo <= addr && addr <= self.hi
    }
}

/// One option of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CondKind {
    /// IP versions allowed (bit 4, bit 6).
    Version(u8),
    /// `tcp`, `udp`, `icmp`, ..., `proto P` or a number: the IP protocol (for
    /// IPv6 the last next header) is one of these.
    Proto(Vec<u8>),
    /// `from ADDR`, `src-ip`, `src-ip6`: the source address lies in one of
    /// these networks.
    SrcIp(Vec<Net>),
    /// `to ADDR`, `dst-ip`, `dst-ip6`: the destination address lies in one of
    /// these networks.
    DstIp(Vec<Net>),
    /// `src-port` or ports after `from`: inclusive ranges; only TCP, UDP, SCTP
    /// and UDP-Lite packets whose ports were read can match.
    SrcPort(Vec<(u16, u16)>),
    /// `dst-port` or ports after `to`: as `SrcPort`.
    DstPort(Vec<(u16, u16)>),
    /// `iplen`: the IP total length (IPv6: payload length + 40), bytes, lies
    /// in one of these inclusive ranges.
    IpLen(Vec<(u16, u16)>),
    /// `ipttl`: the TTL (IPv6: hop limit) lies in one of these inclusive
    /// ranges.
    IpTtl(Vec<(u16, u16)>),
    /// Bit i set: DSCP i matches.
    Dscp(u64),
    /// Flags that must be set, flags that must be clear.
    TcpFlags {
        /// Flag bits that must be set (FIN 0x01, SYN 0x02, RST 0x04, PSH
        /// 0x08, ACK 0x10, URG 0x20, ECE 0x40, CWR 0x80); only TCP packets
        /// whose header was read can match.
        set: u8,
        /// Flag bits that must be clear (written `!flag`).
        clear: u8,
    },
    /// `mac-type`: the EtherType after VLAN tags lies in one of these inclusive
    /// ranges; frames whose link type has no EtherType never match.
    MacType(Vec<(u16, u16)>),
    /// `frag`: a fragment other than the first.
    Frag,
    /// `uid N`: the packet belongs to a local socket of this user (only
    /// known in host mode; never matches where the owner is unknown).
    Uid(u32),
    /// `gid N`: as `Uid`, for the socket's group.
    Gid(u32),
    /// Received on this side.
    Recv(super::Side),
    /// Sent on this side (the other one).
    Xmit(super::Side),
    /// `via IF`: received or sent on this side; with two interfaces every
    /// packet is, so it always holds.
    Via(super::Side),
}

/// One option of a rule as written, possibly negated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    /// `not OPTION` (or `from not ADDR`): the option matches when `kind`
    /// does not hold.
    pub not: bool,
    /// The test.
    pub kind: CondKind,
}

/// One `add` line.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The rule number, 1..65535; a rule added without one is numbered 100
    /// above the highest number before it, as ipfw does.
    pub number: u32,
    /// `prob P`: once its options hold, the rule takes the packet with
    /// probability P (a draw from the rules' own random stream); otherwise
    /// the packet goes on with the next rule.
    pub prob: Option<f64>,
    /// What the rule does with a packet it takes.
    pub action: Action,
    /// `log` was written after the action: accepted and kept, with no effect
    /// in the model (`--events` records every packet's rule anyway).
    pub log: bool,
    /// The options; the rule matches when every one holds.
    pub conds: Vec<Cond>,
    /// Line in the file (1-based) and its text, for errors and `--stats`.
    pub line: usize,
    /// The rule as written (comment and leading `ipfw` removed).
    pub text: String,
}

/// A parsed file: pipes by number, rules in evaluation order.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSet {
    /// Each configured pipe by its number (a later `pipe N config` replaces
    /// an earlier one).
    pub pipes: BTreeMap<u32, PipeDef>,
    /// The rules in evaluation order: by number, equal numbers in file order
    /// (`flush` empties the list).
    pub rules: Vec<Rule>,
    /// `false` after `set one-pass off` / `net.inet.ip.fw.one_pass=0`.
    pub one_pass: bool,
    /// `sched N config`, `queue N config` and pipes' scheduler words.
    pub sched: crate::sched::words::SchedSet,
}

/// Real ipfw rule words (actions and options) linkem does not model.
const UNSUPPORTED: &[&str] = &[
    "me",
    "me6",
    "table",
    "lookup",
    "keep-state",
    "record-state",
    "limit",
    "set-limit",
    "check-state",
    "established",
    "setup",
    "uid",
    "gid",
    "jail",
    "icmptypes",
    "icmp6types",
    "tcpoptions",
    "tcpseq",
    "tcpack",
    "tcpwin",
    "tcpdatalen",
    "tcpmss",
    "ipoptions",
    "ipid",
    "ipprecedence",
    "iptos",
    "ipversion",
    "layer2",
    "mac",
    "antispoof",
    "verrevpath",
    "versrcreach",
    "diverted",
    "diverted-loopback",
    "diverted-output",
    "tagged",
    "tag",
    "untag",
    "fib",
    "setfib",
    "sockarg",
    "bridged",
    "ext6hdr",
    "flow",
    "flow-id",
    "src-addr",
    "dst-addr",
    "reject",
    "unreach",
    "unreach6",
    "reset",
    "reset6",
    "divert",
    "tee",
    "fwd",
    "forward",
    "nat",
    "nat64lsn",
    "nat64stl",
    "nat64clat",
    "nptv6",
    "netgraph",
    "ngtee",
    "call",
    "return",
    "altq",
    "setdscp",
    "reass",
    "abort",
    "abort6",
    "eaction",
    "or",
    "{",
    "}",
    "logamount",
    "set",
    "src-mac",
    "dst-mac",
    "defer-action",
    "skip-action",
    "ipsec",
];

/// Parses a rule file. `files` reads the files named by `profile FILE` and
/// `distribution FILE` (the core does no I/O). `sides` are the names of the
/// interfaces (IF_A, IF_B); `a`/`b` always name them too.
pub fn parse_rules(
    text: &str,
    sides: [&str; 2],
    files: &mut FileReader<'_>,
) -> Result<RuleSet, RulesError> {
    parse_rules_cached(text, sides, files, &mut RuleCache::default())
}

/// The rules of the last parse, by their words, for [`parse_rules_cached`].
///
/// A control plane re-parses its whole rule set at every change, so that a
/// request is checked exactly as the same line in a file would be; with
/// hundreds of rules that parse would cost more than the change. A numbered
/// `add` line means the same rule wherever it stands (only an unnumbered one
/// depends on the rules before it), so its parse is taken from here when the
/// same words were parsed the last time. Only the entries the last parse used
/// are kept: the cache is never larger than the rule set. One cache serves one
/// pair of side names.
#[derive(Debug, Default, Clone)]
pub struct RuleCache {
    rules: HashMap<String, Rule>,
}

/// [`parse_rules`], taking numbered rules parsed the last time from `cache`
/// (and leaving this parse's in it). The result is the same as
/// [`parse_rules`]'s for the same text, errors included.
pub fn parse_rules_cached(
    text: &str,
    sides: [&str; 2],
    files: &mut FileReader<'_>,
    cache: &mut RuleCache,
) -> Result<RuleSet, RulesError> {
    let mut last = std::mem::take(&mut cache.rules);
    let mut set = RuleSet {
        pipes: BTreeMap::new(),
        rules: Vec::new(),
        one_pass: true,
        sched: Default::default(),
    };
    let mut pipe_refs: Vec<(u32, usize, String)> = Vec::new();
    let mut queue_refs: Vec<(u32, usize, String)> = Vec::new();
    for read in statements(text) {
        let Line {
            line,
            text: line_text,
            statement,
        } = read?;
        match statement {
            Statement::Add {
                number,
                numbered,
                body,
            } => {
                let key = format!("{number} {}", body.join(" "));
                let rule = match last
                    .remove(&key)
                    .filter(|r| numbered && r.text == line_text)
                {
                    Some(mut r) => {
                        r.line = line;
                        r
                    }
                    None => parse_add(&body, number, line, line_text, sides)?,
                };
                if numbered {
                    cache.rules.insert(key, rule.clone());
                }
                let action_arg = |word: &str| {
                    let at = body.iter().position(|w| *w == word).unwrap_or(0);
                    body.get(at + 1).unwrap_or(&"").to_string()
                };
                if let Action::Pipe(n) = rule.action {
                    pipe_refs.push((n, line, action_arg("pipe")));
                }
                if let Action::Queue(n) = rule.action {
                    queue_refs.push((n, line, action_arg("queue")));
                }
                // Same numbers keep file order: insert after every rule numbered ≤ it.
                let at = set.rules.partition_point(|r| r.number <= rule.number);
                set.rules.insert(at, rule);
            }
            Statement::Config {
                kind,
                number,
                words,
            } => {
                // `pipe N config` sets the whole pipe, as in Dummynet: a second one replaces it.
                parse_object(kind, number, &words, line, files)?.insert_into(&mut set);
            }
            Statement::OnePass(on) => set.one_pass = on,
            Statement::Flush => set.rules.clear(),
        }
    }
    crate::sched::words::check(&set.sched, &set.pipes, &queue_refs)?;
    for (n, line, word) in pipe_refs {
        if !set.pipes.contains_key(&n) {
            return Err(rerr(
                line,
                &word,
                format!("pipe {n} is not configured (add 'pipe {n} config ...')"),
            ));
        }
    }
    Ok(set)
}

/// Whether everything a rule set names exists: every rule's pipe and queue,
/// every queue's pipe and scheduler, every scheduler's pipe, and each
/// queue's weight and `lmax` fit its pipe's scheduler — what a rule file's
/// parse checks after its last line, for a set changed by typed changes.
pub fn check_set(set: &RuleSet) -> Result<(), RulesError> {
    let mut queue_refs = Vec::new();
    for r in &set.rules {
        match r.action {
            Action::Pipe(n) if !set.pipes.contains_key(&n) => {
                return Err(rerr(
                    r.line,
                    &n.to_string(),
                    format!(
                        "rule {}: pipe {n} is not configured (add 'pipe {n} config ...')",
                        r.number
                    ),
                ));
            }
            Action::Queue(n) => queue_refs.push((n, r.line, n.to_string())),
            _ => {}
        }
    }
    crate::sched::words::check(&set.sched, &set.pipes, &queue_refs)
}

/// One `pipe|queue|sched N config WORDS` line, parsed: what a rule file's
/// line, a control request and a recorded change all become.
#[derive(Debug, Clone, PartialEq)]
pub enum ObjectDef {
    /// `pipe N config WORDS`.
    Pipe {
        /// The link words (those [`PipeDef::parse`] reads).
        def: Box<PipeDef>,
        /// The scheduler and AQM words of the line.
        sched: PipeSched,
        /// Every word after `config`, joined by spaces (`def.words` lacks
        /// the scheduler and AQM ones).
        words: String,
    },
    /// `queue N config WORDS`.
    Queue(Box<QueueDef>),
    /// `sched N config WORDS`.
    Sched(Box<SchedDef>),
}

impl ObjectDef {
    /// Which object the line configures.
    pub fn kind(&self) -> ObjectKind {
        match self {
            ObjectDef::Pipe { .. } => ObjectKind::Pipe,
            ObjectDef::Queue(_) => ObjectKind::Queue,
            ObjectDef::Sched(_) => ObjectKind::Sched,
        }
    }

    /// Its number N.
    pub fn number(&self) -> u32 {
        match self {
            ObjectDef::Pipe { def, .. } => def.number,
            ObjectDef::Queue(q) => q.number,
            ObjectDef::Sched(d) => d.number,
        }
    }

    /// The words after `config`, joined by spaces.
    pub fn words(&self) -> &str {
        match self {
            ObjectDef::Pipe { words, .. } => words,
            ObjectDef::Queue(q) => &q.words,
            ObjectDef::Sched(d) => &d.words,
        }
    }

    /// Puts the object into `set`, replacing one of the same kind and number
    /// (a second `config` sets the whole object, as in Dummynet).
    pub fn insert_into(self, set: &mut RuleSet) {
        match self {
            ObjectDef::Pipe { def, sched, .. } => {
                set.sched.pipes.insert(def.number, sched);
                set.pipes.insert(def.number, *def);
            }
            ObjectDef::Queue(q) => {
                set.sched.queues.insert(q.number, *q);
            }
            ObjectDef::Sched(d) => {
                set.sched.scheds.insert(d.number, *d);
            }
        }
    }
}

/// Parses the words after `pipe|queue|sched N config` (`line`: where the line
/// stands, for errors): the one reading of an object line, for rule files and
/// control requests alike. An error names the word; [`RulesError::position_in`]
/// gives its index in `words`.
pub fn parse_object(
    kind: ObjectKind,
    number: u32,
    words: &[&str],
    line: usize,
    files: &mut FileReader<'_>,
) -> Result<ObjectDef, RulesError> {
    Ok(match kind {
        ObjectKind::Pipe => {
            let (pipe_words, sched) = crate::sched::words::split_pipe_words(words, line)?;
            let def = PipeDef::parse(number, &pipe_words, line, files)?;
            ObjectDef::Pipe {
                def: Box::new(def),
                sched,
                words: words.join(" "),
            }
        }
        ObjectKind::Queue => ObjectDef::Queue(Box::new(crate::sched::words::parse_queue(
            number, words, line,
        )?)),
        ObjectKind::Sched => ObjectDef::Sched(Box::new(crate::sched::words::parse_sched(
            number, words, line,
        )?)),
    })
}

/// Parses a rule body, the words after `add [N]` (`[prob P] ACTION
/// OPTIONS...`), as rule `number` (`line`: where it stands, for errors):
/// the one reading of a rule, for rule files and control requests alike.
/// `None`: a control request's rule not yet numbered (ipfw numbers it 100
/// above the highest rule of the running set); it is numbered by
/// [`Rule::numbered`]. The rule's text is `add N BODY` (`add BODY` until it
/// is numbered). An error names the word; [`RulesError::position_in`] gives
/// its index in `body`.
pub fn parse_rule(
    number: Option<u32>,
    body: &[&str],
    line: usize,
    sides: [&str; 2],
) -> Result<Rule, RulesError> {
    let body_text = body.join(" ");
    let text = match number {
        Some(n) => format!("add {n} {body_text}"),
        None => format!("add {body_text}"),
    };
    parse_add(body, number.unwrap_or(0), line, &text, sides)
}

impl Rule {
    /// A rule parsed by [`parse_rule`] without a number, numbered `number`
    /// (its text `add N BODY`). Errors as the parse would have given them
    /// with that number: a `skipto` that does not jump forward.
    pub fn numbered(mut self, number: u32) -> Result<Rule, RulesError> {
        if let Action::Skipto(n) = self.action {
            if n <= number {
                return Err(rerr(
                    self.line,
                    &n.to_string(),
                    format!("skipto must jump forward (rule {number} to {n})"),
                ));
            }
        }
        let body = self.body().to_string();
        self.number = number;
        self.text = format!("add {number} {body}");
        Ok(self)
    }

    /// The words after `add [N]` in [`Rule::text`] (an `ipfw`/`dnctl` and
    /// `-q`/`-f` before `add` left out), as written.
    pub fn body(&self) -> &str {
        let mut rest = self.text.trim_start();
        // A word and what follows it, blanks before the next word removed.
        let split = |t: &'_ str| -> (usize, usize) {
            let end = t.find(char::is_whitespace).unwrap_or(t.len());
            let next = t[end..]
                .find(|c: char| !c.is_whitespace())
                .map_or(t.len(), |i| end + i);
            (end, next)
        };
        let mut seen_add = false;
        loop {
            let (end, next) = split(rest);
            let word = &rest[..end];
            let skip = match word {
                "ipfw" | "dnctl" | "-q" | "-f" if !seen_add => true,
                "add" if !seen_add => {
                    seen_add = true;
                    true
                }
                // ipfw takes a word starting with a digit as the rule number.
                w if seen_add && w.starts_with(|c: char| c.is_ascii_digit()) => {
                    rest = &rest[next..];
                    break;
                }
                _ => false,
            };
            if !skip || word.is_empty() {
                break;
            }
            rest = &rest[next..];
        }
        rest
    }
}

/// What a `pipe`, `queue` or `sched` line configures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    /// `pipe N config`: a link ([`PipeDef`]).
    Pipe,
    /// `queue N config`: a queue under a scheduler.
    Queue,
    /// `sched N config`: the scheduler of pipe N's link.
    Sched,
}

impl ObjectKind {
    /// The word that starts its lines: `pipe`, `queue`, `sched`.
    pub fn word(self) -> &'static str {
        match self {
            ObjectKind::Pipe => "pipe",
            ObjectKind::Queue => "queue",
            ObjectKind::Sched => "sched",
        }
    }
}

/// One line of a rule file as its first words say, numbers read, the rest
/// of its words not yet checked ([`parse_rules`] checks them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Statement<'a> {
    /// `add [N] BODY`.
    Add {
        /// The rule number: as written, or 100 above the highest rule
        /// number since the start or the last `flush` (ipfw's numbering).
        number: u32,
        /// The number was written.
        numbered: bool,
        /// The words after the number: `[prob P] ACTION OPTIONS...`.
        body: Vec<&'a str>,
    },
    /// `pipe|queue|sched N config WORDS`.
    Config {
        /// Which object.
        kind: ObjectKind,
        /// N, 1..65535.
        number: u32,
        /// The words after `config`.
        words: Vec<&'a str>,
    },
    /// `set one-pass on|off`, `enable|disable one_pass`,
    /// `net.inet.ip.fw.one_pass=1|0`.
    OnePass(bool),
    /// `flush`: the rules so far are removed (pipes, queues and schedulers stay).
    Flush,
}

/// A [`Statement`] and where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line<'a> {
    /// Line in the text, 1-based.
    pub line: usize,
    /// The line without its comment and outer spaces.
    pub text: &'a str,
    /// What it says.
    pub statement: Statement<'a>,
}

/// The statements of a rule file, in order, blank and comment lines left out;
/// a line whose first words are wrong is an error (and the last item).
///
/// Every front end reads a rule file through here — [`parse_rules`], the
/// bridge's control plane when it takes over a file, `linkem replay` — so a
/// number means the same everywhere. Numbers that name things (rule numbers,
/// `pipe|queue|sched N config`, the `pipe N`/`queue N`/`skipto N` of a rule,
/// the `pipe M`/`sched M` of a queue) are decimal, as ipfw reads the first
/// four (atoi, strtoul(…, 10)): `pipe 010` is pipe 10, `pipe 0x10` an error.
/// Values (masks, weights, sizes, ports) take C's syntax (strtoul(…, 0):
/// `0x` hex, leading-0 octal), as ipfw reads them.
pub fn statements(text: &str) -> Statements<'_> {
    Statements {
        lines: text.lines().enumerate(),
        highest: None,
        failed: false,
    }
}

/// The iterator of [`statements`].
#[derive(Debug, Clone)]
pub struct Statements<'a> {
    lines: std::iter::Enumerate<std::str::Lines<'a>>,
    /// The highest rule number since the start or the last `flush`.
    highest: Option<u32>,
    failed: bool,
}

impl<'a> Iterator for Statements<'a> {
    type Item = Result<Line<'a>, RulesError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        for (i, raw) in self.lines.by_ref() {
            let line = i + 1;
            let body = raw.split('#').next().unwrap_or("");
            let body = body.split("//").next().unwrap_or("").trim();
            let mut words: Vec<&'a str> = body.split_whitespace().collect();
            if matches!(
                words.first(),
                Some(&"ipfw") | Some(&"dnctl") | Some(&"sysctl")
            ) {
                words.remove(0);
            }
            while matches!(words.first(), Some(&"-q") | Some(&"-f")) {
                words.remove(0);
            }
            if words.is_empty() {
                continue;
            }
            let read = read_statement(&words, line, &mut self.highest).map(|statement| Line {
                line,
                text: body,
                statement,
            });
            self.failed = read.is_err();
            return Some(read);
        }
        None
    }
}

fn no_more(words: &[&str], at: usize, line: usize) -> Result<(), RulesError> {
    match words.get(at) {
        Some(w) => Err(rerr(line, w, "unexpected word")),
        None => Ok(()),
    }
}

fn read_statement<'a>(
    words: &[&'a str],
    line: usize,
    highest: &mut Option<u32>,
) -> Result<Statement<'a>, RulesError> {
    let first = words[0];
    Ok(match first {
        "add" => {
            // ipfw takes a word starting with a digit as the rule number.
            let (number, numbered, body) = match words.get(1) {
                Some(w) if w.starts_with(|c: char| c.is_ascii_digit()) => {
                    (object_number(line, w, "rule")?, true, &words[2..])
                }
                _ => {
                    // ipfw numbers an unnumbered rule 100 after the highest so far.
                    let n = highest.unwrap_or(0) + 100;
                    if n > 65535 {
                        return Err(rerr(line, "add", "automatic rule number beyond 65535"));
                    }
                    (n, false, &words[1..])
                }
            };
            *highest = Some(highest.map_or(number, |h| h.max(number)));
            Statement::Add {
                number,
                numbered,
                body: body.to_vec(),
            }
        }
        "pipe" | "queue" | "sched" => {
            let kind = match first {
                "pipe" => ObjectKind::Pipe,
                "queue" => ObjectKind::Queue,
                _ => ObjectKind::Sched,
            };
            let number = object_number(line, words.get(1).unwrap_or(&""), first)?;
            match words.get(2) {
                Some(&"config") => {}
                Some(&w @ ("show" | "list" | "delete" | "flush")) => {
                    return Err(rerr(line, w, "not supported in a rule file"))
                }
                w => return Err(rerr(line, w.unwrap_or(&""), "expected 'config'")),
            }
            Statement::Config {
                kind,
                number,
                words: words[3..].to_vec(),
            }
        }
        "set" if words.get(1) == Some(&"one-pass") => {
            let on = match words.get(2) {
                Some(&"off") => false,
                Some(&"on") => true,
                w => return Err(rerr(line, w.unwrap_or(&""), "one-pass is 'on' or 'off'")),
            };
            no_more(words, 3, line)?;
            Statement::OnePass(on)
        }
        "enable" | "disable" if words.get(1) == Some(&"one_pass") => {
            no_more(words, 2, line)?;
            Statement::OnePass(first == "enable")
        }
        w if w.starts_with("net.inet.ip.fw.one_pass=") => {
            let on = match &w["net.inet.ip.fw.one_pass=".len()..] {
                "0" => false,
                "1" => true,
                _ => return Err(rerr(line, w, "one_pass is 0 or 1")),
            };
            no_more(words, 1, line)?;
            Statement::OnePass(on)
        }
        "flush" => {
            no_more(words, 1, line)?;
            *highest = None;
            Statement::Flush
        }
        "delete" | "zero" | "resetlog" | "table" | "nat" | "set" | "enable" | "disable"
        | "show" | "list" | "sysctl" => return Err(rerr(line, first, "not supported")),
        _ => {
            return Err(rerr(
                line,
                first,
                "unknown command (expected add, pipe N config, set one-pass off)",
            ))
        }
    })
}

/// The pipe or queue a rule sends its packets to, read from its body (the
/// words after the rule number: `[prob P] ACTION ...`) as [`parse_rules`]
/// reads them; `None` for other actions and for a body it would refuse there.
pub fn rule_target(body: &[&str]) -> Option<(ObjectKind, u32)> {
    let at = if body.first() == Some(&"prob") { 2 } else { 0 };
    let kind = match *body.get(at)? {
        "pipe" => ObjectKind::Pipe,
        "queue" => ObjectKind::Queue,
        _ => return None,
    };
    let n = parse_decimal(body.get(at + 1)?).filter(|n| (1..=65535).contains(n))?;
    Some((kind, n as u32))
}

/// Whether a rule file says anything: a rule, a pipe, queue or scheduler, or
/// a `flush` (an empty rule set asked for). A file of only blank lines and
/// comments — an empty or half-written file — says nothing, and a front end
/// that reads rules from a file refuses it rather than run no emulation.
pub fn says_something(text: &str) -> bool {
    statements(text).any(|s| {
        s.map_or(true, |l| {
            matches!(
                l.statement,
                Statement::Add { .. } | Statement::Config { .. } | Statement::Flush
            )
        })
    })
}

struct Cursor<'a> {
    words: &'a [&'a str],
    at: usize,
    line: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.words.get(self.at).copied()
    }
    fn next(&mut self) -> Option<&'a str> {
        let w = self.peek();
        self.at += 1;
        w
    }
    fn arg(&mut self, keyword: &str, what: &str) -> Result<&'a str, RulesError> {
        self.next()
            .ok_or_else(|| rerr(self.line, keyword, format!("'{keyword}' needs {what}")))
    }
    fn err(&self, word: &str, message: impl Into<String>) -> RulesError {
        rerr(self.line, word, message)
    }
}

fn parse_add(
    words: &[&str],
    number: u32,
    line: usize,
    text: &str,
    sides: [&str; 2],
) -> Result<Rule, RulesError> {
    let mut c = Cursor { words, at: 0, line };
    let mut prob = None;
    if c.peek() == Some("prob") {
        c.next();
        let w = c.arg("prob", "a probability such as 0.2")?;
        let p = crate::units::parse_probability(w).map_err(|e| c.err(w, e.0))?;
        prob = Some(p);
    }
    let aw = c.arg("add", "an action (pipe N, allow, deny, count, skipto N)")?;
    let action = match aw {
        "pipe" => {
            let w = c.arg("pipe", "a pipe number")?;
            Action::Pipe(object_number(line, w, "pipe")?)
        }
        "queue" => {
            let w = c.arg("queue", "a queue number")?;
            Action::Queue(object_number(line, w, "queue")?)
        }
        "allow" | "accept" | "pass" | "permit" => Action::Allow,
        "deny" | "drop" => Action::Deny,
        "count" => Action::Count,
        "skipto" => {
            let w = c.arg("skipto", "a rule number")?;
            let n = object_number(line, w, "rule")?;
            if n <= number {
                return Err(c.err(
                    w,
                    format!("skipto must jump forward (rule {number} to {n})"),
                ));
            }
            Action::Skipto(n)
        }
        w if UNSUPPORTED.contains(&w) => return Err(c.err(w, "not supported")),
        w => {
            return Err(c.err(
                w,
                "unknown action (pipe N, queue N, allow, deny, count, skipto N)",
            ))
        }
    };
    let mut log = false;
    if c.peek() == Some("log") {
        c.next();
        log = true;
    }
    let mut conds = Vec::new();
    let mut not = false;
    while let Some(w) = c.next() {
        let kind = match w {
            "not" => {
                if not {
                    return Err(c.err(w, "'not not'"));
                }
                not = true;
                continue;
            }
            "ip" | "all" => {
                expect_no_not(&c, not, w)?;
                continue;
            }
            "ip4" | "ipv4" => CondKind::Version(1 << 4),
            "ip6" | "ipv6" => CondKind::Version(1 << 6),
            "tcp" | "udp" | "icmp" | "icmp6" | "ipv6-icmp" | "sctp" => {
                CondKind::Proto(vec![proto_number(w).expect("listed")])
            }
            "proto" => {
                let a = c.arg(w, "a protocol")?;
                match a {
                    "ip" | "all" => continue,
                    "ip4" | "ipv4" => CondKind::Version(1 << 4),
                    "ip6" | "ipv6" => CondKind::Version(1 << 6),
                    _ => CondKind::Proto(vec![
                        proto_number(a).ok_or_else(|| c.err(a, "unknown protocol"))?
                    ]),
                }
            }
            w if w.bytes().all(|b| b.is_ascii_digit()) => {
                let n: u8 = w
                    .parse()
                    .map_err(|_| c.err(w, "a protocol number is 0..255"))?;
                CondKind::Proto(vec![n])
            }
            "from" | "to" => {
                let mut neg = not;
                let mut a = c.arg(w, "an address (any, 10.0.0.0/8, 2001:db8::/32, {a,b})")?;
                if a == "not" {
                    neg = !neg;
                    a = c.arg(w, "an address")?;
                }
                let nets = parse_addrs(&c, a)?;
                if let Some(nets) = nets {
                    conds.push(Cond {
                        not: neg,
                        kind: if w == "from" {
                            CondKind::SrcIp(nets)
                        } else {
                            CondKind::DstIp(nets)
                        },
                    });
                } else if neg {
                    return Err(c.err(a, "'not any' matches nothing"));
                }
                not = false;
                if let Some(p) = c.peek().filter(|p| looks_like_ports(p)) {
                    c.next();
                    let ranges = parse_ranges(&c, p, 65535, service_port)?;
                    conds.push(Cond {
                        not: false,
                        kind: if w == "from" {
                            CondKind::SrcPort(ranges)
                        } else {
                            CondKind::DstPort(ranges)
                        },
                    });
                }
                continue;
            }
            "src-ip" | "dst-ip" | "src-ip6" | "dst-ip6" => {
                let a = c.arg(w, "an address list")?;
                let nets = parse_addrs(&c, a)?.unwrap_or_else(|| {
                    vec![
                        Net {
                            lo: v4_mapped(0),
                            hi: v4_mapped(u32::MAX),
                            v6: false,
                        },
                        Net {
                            lo: 0,
                            hi: u128::MAX,
                            v6: true,
                        },
                    ]
                });
                if w.ends_with('6') && nets.iter().any(|n| !n.v6) {
                    return Err(c.err(a, format!("{w} takes IPv6 addresses")));
                }
                if w.starts_with("src") {
                    CondKind::SrcIp(nets)
                } else {
                    CondKind::DstIp(nets)
                }
            }
            "src-port" | "dst-port" => {
                let a = c.arg(w, "ports such as 80,443 or 1000-2000")?;
                let r = parse_ranges(&c, a, 65535, service_port)?;
                if w == "src-port" {
                    CondKind::SrcPort(r)
                } else {
                    CondKind::DstPort(r)
                }
            }
            "iplen" => {
                let a = c.arg(w, "lengths")?;
                CondKind::IpLen(parse_ranges(&c, a, 65535, |_| None)?)
            }
            "uid" | "gid" => {
                let a = c.arg(w, "a numeric id")?;
                let id = parse_number(a)
                    .filter(|&n| n <= u64::from(u32::MAX))
                    .ok_or_else(|| {
                        c.err(a, format!("{w} takes a number 0..4294967295 (no names)"))
                    })? as u32;
                if w == "uid" {
                    CondKind::Uid(id)
                } else {
                    CondKind::Gid(id)
                }
            }
            "ipttl" => {
                let a = c.arg(w, "TTLs")?;
                CondKind::IpTtl(parse_ranges(&c, a, 255, |_| None)?)
            }
            "dscp" => {
                let a = c.arg(w, "DSCP code points (46, ef, af11, cs1, ...)")?;
                let mut bits = 0u64;
                for part in a.split(',') {
                    let v = dscp_value(part).ok_or_else(|| {
                        c.err(
                            part,
                            "not a DSCP value (0..63 or ef, af11..af43, cs0..cs7, be)",
                        )
                    })?;
                    bits |= 1 << v;
                }
                CondKind::Dscp(bits)
            }
            "tcpflags" | "tcpflag" => {
                let a = c.arg(w, "flags such as syn,!ack")?;
                let (mut set, mut clear) = (0u8, 0u8);
                for part in a.split(',') {
                    let (neg, name) = match part.strip_prefix('!') {
                        Some(n) => (true, n),
                        None => (false, part),
                    };
                    let bit = match name {
                        "fin" => 0x01,
                        "syn" => 0x02,
                        "rst" => 0x04,
                        "push" | "psh" => 0x08,
                        "ack" => 0x10,
                        "urg" => 0x20,
                        "ece" => 0x40,
                        "cwr" => 0x80,
                        _ => {
                            return Err(c.err(
                                part,
                                "not a TCP flag (fin, syn, rst, push, ack, urg, ece, cwr)",
                            ))
                        }
                    };
                    if neg {
                        clear |= bit;
                    } else {
                        set |= bit;
                    }
                }
                CondKind::TcpFlags { set, clear }
            }
            "mac-type" => {
                let a = c.arg(w, "EtherTypes such as ip,ipv6,arp or 0x0800")?;
                CondKind::MacType(parse_ranges(&c, a, 65535, ether_type)?)
            }
            "frag" => {
                if let Some(p) = c.peek().filter(|p| {
                    p.split(',')
                        .all(|x| matches!(x.trim_start_matches('!'), "mf" | "df" | "rf" | "offset"))
                }) {
                    return Err(c.err(p, "not supported (frag takes no flags in linkem)"));
                }
                CondKind::Frag
            }
            "in" | "a-to-b" => CondKind::Recv(super::Side::A),
            "out" | "b-to-a" => CondKind::Recv(super::Side::B),
            "recv" | "xmit" | "via" => {
                let a = c.arg(w, "an interface name")?;
                let side = if a == "a" || a == sides[0] {
                    super::Side::A
                } else if a == "b" || a == sides[1] {
                    super::Side::B
                } else if a == "any" {
                    continue;
                } else {
                    return Err(c.err(
                        a,
                        format!(
                            "no interface '{a}' here (this node has '{}' (a) and '{}' (b))",
                            sides[0], sides[1]
                        ),
                    ));
                };
                match w {
                    "recv" => CondKind::Recv(side),
                    "xmit" => CondKind::Xmit(side),
                    _ => CondKind::Via(side),
                }
            }
            "log" => return Err(c.err(w, "'log' goes right after the action")),
            "prob" => return Err(c.err(w, "'prob P' goes before the action")),
            w if UNSUPPORTED.contains(&w) => return Err(c.err(w, "not supported")),
            w if w.parse::<Ipv4Addr>().is_ok() || w.contains('/') || w == "any" => {
                return Err(c.err(
                    w,
                    "an address goes after 'from', 'to', 'src-ip' or 'dst-ip'",
                ))
            }
            w => return Err(c.err(w, "unknown word")),
        };
        conds.push(Cond { not, kind });
        not = false;
    }
    if not {
        return Err(c.err("not", "'not' at the end of the rule"));
    }
    Ok(Rule {
        number,
        prob,
        action,
        log,
        conds,
        line,
        text: text.trim_start_matches("ipfw ").trim().to_string(),
    })
}

fn expect_no_not(c: &Cursor<'_>, not: bool, w: &str) -> Result<(), RulesError> {
    if not {
        Err(c.err(w, format!("'not {w}' matches nothing")))
    } else {
        Ok(())
    }
}

fn proto_number(w: &str) -> Option<u8> {
    Some(match w {
        "icmp" => 1,
        "igmp" => 2,
        "tcp" => 6,
        "udp" => 17,
        "gre" => 47,
        "esp" => 50,
        "ah" => 51,
        "icmp6" | "ipv6-icmp" => 58,
        "sctp" => 132,
        "udplite" => 136,
        _ => return w.parse().ok(),
    })
}

fn service_port(w: &str) -> Option<u16> {
    Some(match w {
        "ftp" => 21,
        "ssh" => 22,
        "telnet" => 23,
        "smtp" => 25,
        "domain" => 53,
        "http" => 80,
        "ntp" => 123,
        "https" => 443,
        _ => return None,
    })
}

fn ether_type(w: &str) -> Option<u16> {
    Some(match w {
        "ip" | "ipv4" => 0x0800,
        "arp" => 0x0806,
        "rarp" => 0x8035,
        "vlan" => 0x8100,
        "ipv6" => 0x86dd,
        _ => return None,
    })
}

fn dscp_value(w: &str) -> Option<u8> {
    if let Ok(n) = w.parse::<u8>() {
        return (n < 64).then_some(n);
    }
    Some(match w {
        "be" => 0,
        "ef" => 46,
        "va" => 44,
        _ => {
            if let Some(n) = w.strip_prefix("cs") {
                let n: u8 = n.parse().ok().filter(|n| *n < 8)?;
                n << 3
            } else if let Some(n) = w.strip_prefix("af") {
                let b = n.as_bytes();
                if b.len() != 2 || !(b'1'..=b'4').contains(&b[0]) || !(b'1'..=b'3').contains(&b[1])
                {
                    return None;
                }
                ((b[0] - b'0') << 3) | ((b[1] - b'0') << 1)
            } else {
                return None;
            }
        }
    })
}

fn looks_like_ports(w: &str) -> bool {
    w.bytes().next().is_some_and(|b| b.is_ascii_digit()) && !w.contains('.') && !w.contains(':')
        || service_port(w.split(',').next().unwrap_or("")).is_some()
}

/// `a,b,c-d` lists of numbers (any base, or names through `name`).
fn parse_ranges(
    c: &Cursor<'_>,
    text: &str,
    max: u64,
    name: impl Fn(&str) -> Option<u16>,
) -> Result<Vec<(u16, u16)>, RulesError> {
    let one = |w: &str| -> Result<u16, RulesError> {
        if let Some(v) = name(w) {
            return Ok(v);
        }
        parse_number(w)
            .filter(|&n| n <= max)
            .map(|n| n as u16)
            .ok_or_else(|| c.err(w, format!("expected a number 0..{max}")))
    };
    let mut out = Vec::new();
    for part in text.split(',') {
        if part.is_empty() {
            return Err(c.err(text, "empty item in a list"));
        }
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (one(a)?, one(b)?),
            None => {
                let v = one(part)?;
                (v, v)
            }
        };
        if lo > hi {
            return Err(c.err(part, "a range goes from low to high"));
        }
        out.push((lo, hi));
    }
    Ok(out)
}

/// An address list; `None` for `any`.
fn parse_addrs(c: &Cursor<'_>, text: &str) -> Result<Option<Vec<Net>>, RulesError> {
    if text == "any" {
        return Ok(None);
    }
    if UNSUPPORTED.contains(&text) || text.starts_with("table(") {
        return Err(c.err(text, "not supported"));
    }
    let inner = match text.strip_prefix('{') {
        Some(rest) => rest
            .strip_suffix('}')
            .ok_or_else(|| c.err(text, "a list is written {a,b,c} without spaces"))?,
        None => text,
    };
    let mut out = Vec::new();
    for part in inner.split(',') {
        out.push(parse_net(c, part)?);
    }
    Ok(Some(out))
}

fn parse_net(c: &Cursor<'_>, text: &str) -> Result<Net, RulesError> {
    let (addr, len) = match text.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (text, None),
    };
    if let Ok(v4) = addr.parse::<Ipv4Addr>() {
        let bits = match len {
            None => 32,
            Some(l) => l
                .parse::<u32>()
                .ok()
                .filter(|&n| n <= 32)
                .ok_or_else(|| c.err(text, "an IPv4 prefix length is 0..32"))?,
        };
        let a = u32::from(v4);
        let mask = if bits == 0 {
            0
        } else {
            u32::MAX << (32 - bits)
        };
        return Ok(Net {
            lo: v4_mapped(a & mask),
            hi: v4_mapped(a | !mask),
            v6: false,
        });
    }
    if let Ok(v6) = addr.parse::<Ipv6Addr>() {
        let bits = match len {
            None => 128,
            Some(l) => l
                .parse::<u32>()
                .ok()
                .filter(|&n| n <= 128)
                .ok_or_else(|| c.err(text, "an IPv6 prefix length is 0..128"))?,
        };
        let a = u128::from(v6);
        let mask = if bits == 0 {
            0
        } else {
            u128::MAX << (128 - bits)
        };
        return Ok(Net {
            lo: a & mask,
            hi: a | !mask,
            v6: true,
        });
    }
    if addr.contains(':')
        && addr.split(':').count() == 2
        && addr
            .split(':')
            .next()
            .is_some_and(|a| a.parse::<Ipv4Addr>().is_ok())
    {
        return Err(c.err(text, "not supported (addr:mask; write addr/len)"));
    }
    if addr.bytes().any(|b| b.is_ascii_alphabetic()) && !addr.contains(':') {
        return Err(c.err(
            text,
            "not supported: host names (write an address; linkem does no name lookups)",
        ));
    }
    Err(c.err(
        text,
        "not an address (10.0.0.1, 10.0.0.0/8, 2001:db8::/32, any)",
    ))
}

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

use crate::pipe::{FileReader, PipeDef};
use crate::rulefile::rerr;
pub use crate::rulefile::{parse_decimal, RulesError, WordAt};
use crate::sched::words::{PipeSched, QueueDef, SchedDef};
use std::collections::{BTreeMap, HashMap};

mod add;
mod statement;

use add::parse_add;
pub use statement::{rule_target, says_something, statements, Line, Statement, Statements};

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

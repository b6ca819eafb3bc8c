//! Reading a request line: its `@ID`, then the request's words, each refused with its
//! 1-based position in the line.

use super::*;
use linkem_core::config::FileLoader;
use linkem_core::rules::{parse_object, parse_rule, RulesError};
use linkem_core::units::parse_time_or_bare_ns;
use linkem_core::LinkSpec;

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
    parse_in(line, files, sides, None)
}

/// [`parse_line`] for a socket that serves the links `names` (a group of
/// pairs, a lab): `link`, `replace` name their link first, `show` and
/// `stats` may; a name not among `names` is refused, naming a few that are.
pub fn parse_line_named(
    line: &str,
    files: &mut FileLoader<'_>,
    names: &[&str],
) -> Result<Line, ParseError> {
    parse_in(line, files, ["a", "b"], Some(names))
}

fn parse_in(
    line: &str,
    files: &mut FileLoader<'_>,
    sides: [&str; 2],
    names: Option<&[&str]>,
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
    let request = parse_request(&mut c, files, sides, names)?;
    Ok(Line { id, request })
}

fn parse_request(
    c: &mut Cursor<'_>,
    files: &mut FileLoader<'_>,
    sides: [&str; 2],
    names: Option<&[&str]>,
) -> Result<Request, ParseError> {
    let Some(verb) = c.take() else {
        return Err(ParseError::general("empty request (try 'help')"));
    };
    let simple = |c: &Cursor<'_>, r: Request| c.end(verb).map(|_| r);
    match verb {
        "ping" => simple(c, Request::Ping),
        "version" => simple(c, Request::Version),
        "help" => simple(c, Request::Help),
        "stats" => {
            let target = optional_target(c, names)?;
            c.end(verb)?;
            Ok(Request::Stats { target })
        }
        "zero" => simple(c, Request::Zero),
        "begin" => simple(c, Request::Begin),
        "commit" => simple(c, Request::Commit),
        "abort" => simple(c, Request::Abort),
        "flush" => simple(c, Request::Rule(RuleRequest::Flush)),
        "claims" => simple(c, Request::Claims),
        "claim" | "release" => claim_request(c, verb == "release", files).map(Request::Claim),
        "show" | "list" => {
            let target = match verb {
                "show" => optional_target(c, names)?,
                _ => None,
            };
            if c.peek() == Some("--json") {
                c.next += 1;
            }
            c.end(verb)?;
            Ok(if verb == "show" {
                Request::Show { target }
            } else {
                Request::List
            })
        }
        "watch" => watch_request(c),
        "link" | "replace" => link_request(c, files, verb == "replace", names),
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

/// A few of `names` for an error, with how many are left out.
fn some_names(names: &[&str]) -> String {
    const SHOWN: usize = 5;
    let mut s = names
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        s += &format!(" and {} more ('list' names all)", names.len() - SHOWN);
    }
    s
}

/// The link a request names, in a socket of several links: the next word,
/// which must be one of `names`.
fn target(c: &mut Cursor<'_>, names: &[&str], verb: &str) -> Result<String, ParseError> {
    let Some(w) = c.take() else {
        return Err(c.here(format!(
            "'{verb}' names a link first here (links: {})",
            some_names(names)
        )));
    };
    if names.contains(&w) {
        return Ok(w.to_string());
    }
    let why = if is_direction(w) || linkem_core::config::is_link_word(w) {
        format!("this socket serves several links: name one first, '{verb} NAME ...'")
    } else {
        format!("no link '{w}' here")
    };
    Err(c.here(format!("{why} (links: {})", some_names(names))))
}

/// `show [NAME]`, `stats [NAME]`: the name, if one is given in a socket of
/// several links.
fn optional_target(
    c: &mut Cursor<'_>,
    names: Option<&[&str]>,
) -> Result<Option<String>, ParseError> {
    match (names, c.peek()) {
        (Some(names), Some(w)) if w != "--json" => target(c, names, "show").map(Some),
        _ => Ok(None),
    }
}

fn is_direction(w: &str) -> bool {
    matches!(w, "a-to-b" | "a->b" | "b-to-a" | "b->a" | "both")
}

/// `link|replace [NAME] [a-to-b|b-to-a|both] WORDS`: the link's words,
/// without a seed; NAME in a socket of several links (`names`).
fn link_request(
    c: &mut Cursor<'_>,
    files: &mut FileLoader<'_>,
    replace: bool,
    names: Option<&[&str]>,
) -> Result<Request, ParseError> {
    let verb = if replace { "replace" } else { "link" };
    let target = match names {
        Some(names) => Some(target(c, names, verb)?),
        None => None,
    };
    // Without a direction the words apply to both, as they do on
    // `linkem bridge`'s command line and in the Python client's link("both", ...).
    let dir = match c.peek() {
        Some("a-to-b" | "a->b") => Dir::AToB,
        Some("b-to-a" | "b->a") => Dir::BToA,
        Some(_) => Dir::Both,
        None => {
            return Err(c.here(format!(
                "'{verb}' needs words, after a direction (a-to-b, b-to-a or both) or alone for both"
            )))
        }
    };
    if c.peek().is_some_and(is_direction) {
        c.take();
    }
    let first = c.next;
    let words = &c.words[first..];
    let at = |e: linkem_core::config::ConfigError| c.at(first + e.position - 1, e.message);
    let link = if replace {
        Some(LinkSpec::parse_words(words, files).map_err(at)?)
    } else {
        LinkSpec::check_patch(words, files).map_err(at)?;
        // Alone over the defaults, when the words are complete by themselves.
        LinkSpec::parse_words(words, files).ok()
    };
    if words.contains(&"seed") {
        let at = words.iter().position(|w| *w == "seed").unwrap_or(0);
        return Err(c.at(
            first + at,
            "the seed is fixed when the emulator starts (a change keeps the random streams)",
        ));
    }
    if !replace && words.is_empty() {
        return Err(c.at(first, "'link' needs words: the ones to change"));
    }
    let words = c.rest();
    Ok(Request::Link {
        target,
        dir,
        replace,
        link: link.map(|s| Box::new(s.link)),
        words,
        first: first + 1,
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

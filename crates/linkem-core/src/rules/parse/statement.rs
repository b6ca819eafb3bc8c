//! The first words of each line of a rule file: the command, the object or rule
//! number, `flush` and one-pass, read alike for the parser and every control plane.

use super::{parse_decimal, ObjectKind, RulesError};
use crate::rulefile::{object_number, rerr};

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

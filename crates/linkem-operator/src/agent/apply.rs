//! One batch per emulator through its control socket: `begin`, `replace
//! a-to-b WORDS`, `replace b-to-a WORDS`, `commit`. The emulator checks each
//! line as it comes and applies all at one instant on `commit` (the reply's
//! `at_ns`), or nothing when any line failed: then the agent sends `abort`
//! and reports the refused line's word, its position among the direction's
//! words (the reply's position less the two words `replace DIR`), and the
//! reason.
//!
//! An emulator running a Dummynet rule set (linkem-cni's `rules`) takes no
//! `replace`: its rule set is replaced whole, in one batch too
//! ([`apply_rules`]): `begin`, `flush` (over the control socket: every
//! rule, pipe, queue and scheduler), `set one-pass on` (the default a rule
//! file starts from), the new set's lines, `commit`. The emulator takes the
//! resulting set at one instant, and a pipe the new set configures again
//! keeps its queued packets.

use linkem_ctl::Client;
use serde_json::Value;
use std::io;
use std::path::Path;
use std::time::Duration;

/// How long one reply may take: an emulator answers in microseconds; a
/// stalled one must not hold the agent's other pods.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(2);

/// What the emulator did with a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Applied from `at_ns` (CLOCK_REALTIME ns).
    Applied { at_ns: u64 },
    /// Nothing changed: the emulator direction (`a-to-b`, `b-to-a`, or
    /// empty for the batch as a whole), its words, and the refusal.
    Refused {
        direction: String,
        words: String,
        message: String,
        word: Option<String>,
        position: Option<u32>,
    },
}

fn reply_error(v: &Value) -> String {
    v["error"]
        .as_str()
        .unwrap_or("refused, no reason given")
        .to_string()
}

fn expect_ok(c: &mut Client, line: &str) -> io::Result<Value> {
    let v = c.request_json(line)?;
    if v["ok"] != true {
        return Err(io::Error::other(format!("'{line}': {}", reply_error(&v))));
    }
    Ok(v)
}

/// Sends the batch making the emulator's directions exactly `a_to_b` and
/// `b_to_a`. An I/O error (no socket yet, a timeout) means nothing is known
/// to have changed: the agent tries again later.
pub fn apply_batch(socket: &Path, a_to_b: &str, b_to_a: &str) -> io::Result<Outcome> {
    let mut c = Client::connect(socket, REPLY_TIMEOUT)?;
    expect_ok(&mut c, "begin")?;
    for (dir, words) in [("a-to-b", a_to_b), ("b-to-a", b_to_a)] {
        let v = c.request_json(&format!("replace {dir} {words}"))?;
        if v["ok"] != true {
            let _ = c.request_json("abort");
            // The line's words 1 and 2 are `replace DIR`.
            let position = v["position"]
                .as_u64()
                .and_then(|p| p.checked_sub(2))
                .filter(|p| *p >= 1)
                .and_then(|p| u32::try_from(p).ok());
            return Ok(Outcome::Refused {
                direction: dir.into(),
                words: words.into(),
                message: reply_error(&v),
                word: position.and(v["word"].as_str().map(str::to_string)),
                position,
            });
        }
    }
    commit(&mut c, "", format!("a-to-b: {a_to_b}; b-to-a: {b_to_a}"))
}

/// Ends a batch whose every line was taken: applied at the reply's `at_ns`,
/// or refused as a whole (`direction` and `words` name the batch).
fn commit(c: &mut Client, direction: &str, words: String) -> io::Result<Outcome> {
    let v = c.request_json("commit")?;
    if v["ok"] != true {
        return Ok(Outcome::Refused {
            direction: direction.into(),
            words,
            message: reply_error(&v),
            word: None,
            position: None,
        });
    }
    let at_ns = v["at_ns"].as_u64().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("commit without at_ns: {v}"),
        )
    })?;
    Ok(Outcome::Applied { at_ns })
}

/// The control lines of a rule set's text (a rule file: `ipfw`/`dnctl`
/// and `-q` dropped, comments and blank lines left out, `add` numbered as
/// the file numbers it).
pub fn rule_lines(text: &str) -> Result<Vec<String>, String> {
    use linkem_core::rules::{ObjectKind, Statement};
    let mut lines = vec![];
    for line in linkem_core::rules::statements(text) {
        let line = line.map_err(|e| format!("line {}: '{}': {}", e.line, e.word, e.message))?;
        lines.push(match line.statement {
            Statement::Add { number, body, .. } => format!("add {number} {}", body.join(" ")),
            Statement::Config {
                kind,
                number,
                words,
            } => {
                let kind = match kind {
                    ObjectKind::Pipe => "pipe",
                    ObjectKind::Queue => "queue",
                    ObjectKind::Sched => "sched",
                };
                format!("{kind} {number} config {}", words.join(" "))
            }
            Statement::OnePass(on) => format!("set one-pass {}", if on { "on" } else { "off" }),
            Statement::Flush => "flush".into(),
        });
    }
    Ok(lines)
}

/// Sends the batch making the emulator's rule set exactly `rules` (a rule
/// file's text). A refused line is reported with `direction` `rules`, the
/// line as `words`, and the word and its position in that line.
pub fn apply_rules(socket: &Path, rules: &str) -> io::Result<Outcome> {
    let new_lines = match rule_lines(rules) {
        Ok(l) => l,
        Err(message) => {
            return Ok(Outcome::Refused {
                direction: "rules".into(),
                words: String::new(),
                message,
                word: None,
                position: None,
            })
        }
    };
    let mut c = Client::connect(socket, REPLY_TIMEOUT)?;
    let mut batch = vec!["flush".to_string(), "set one-pass on".to_string()];
    batch.extend(new_lines);
    expect_ok(&mut c, "begin")?;
    for line in &batch {
        let v = c.request_json(line)?;
        if v["ok"] != true {
            let _ = c.request_json("abort");
            let position = v["position"].as_u64().and_then(|p| u32::try_from(p).ok());
            return Ok(Outcome::Refused {
                direction: "rules".into(),
                words: line.clone(),
                message: reply_error(&v),
                word: position.and(v["word"].as_str().map(str::to_string)),
                position,
            });
        }
    }
    commit(&mut c, "rules", String::new())
}

/// One request's parsed reply (`stats`, `show --json`, `list`), refused
/// replies as errors.
pub fn query(socket: &Path, request: &str) -> io::Result<Value> {
    let mut c = Client::connect(socket, REPLY_TIMEOUT)?;
    expect_ok(&mut c, request)
}

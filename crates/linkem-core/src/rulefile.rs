//! What every reader of rule-file words shares: the error that names the
//! line and the word ([`RulesError`], built by [`rerr`]), and ipfw's two
//! number syntaxes: [`parse_decimal`] for numbers that name things (rules,
//! pipes, queues, schedulers; [`object_number`] adds the 1..65535 range) and
//! [`parse_number`] for values (strtoul base 0: decimal, `0x` hex,
//! leading-0 octal).
//!
//! It sits below the three readers of a rule file — [`crate::rules::parse`]
//! (lines and rules), [`crate::pipe`] (`pipe N config` words and masks) and
//! [`crate::sched::words`] (scheduler, queue and AQM words) — so that each
//! imports these from here and none imports another's helpers back.
//! [`crate::rules`] re-exports the public items, where users find them.

/// A rule file problem: the line, the word, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: '{word}': {message}")]
pub struct RulesError {
    /// Line in the rule file, 1-based.
    pub line: usize,
    /// The word at fault, as written (empty when something is missing at the
    /// end of the line).
    pub word: String,
    /// What is wrong with it.
    pub message: String,
    /// Where the word the parser refused lies in memory: see [`WordAt`].
    pub at: WordAt,
}

/// The address range of the word a parser refused, when that word is (part
/// of) one of the words it was given: [`RulesError::position_in`] turns it
/// into the word's index, so that a front end parsing words of a request
/// names the word and its position from the parse itself, not from a search
/// for equal text (which would find the first `1` of `delay 1 bw 1`). Errors
/// compare equal whatever it holds: it says where, not what.
#[derive(Debug, Clone, Copy, Default)]
pub struct WordAt(Option<(usize, usize)>);

impl PartialEq for WordAt {
    fn eq(&self, _: &WordAt) -> bool {
        true
    }
}

impl Eq for WordAt {}

impl RulesError {
    /// The index in `words` of the word this error names, when the parser
    /// refused one of these words (or a part of one, such as one port of a
    /// list); None for a word it made up (a number it printed) or one missing
    /// at the end.
    pub fn position_in(&self, words: &[&str]) -> Option<usize> {
        let (start, len) = self.at.0?;
        words.iter().position(|w| {
            let lo = w.as_ptr() as usize;
            len > 0 && lo <= start && start + len <= lo + w.len()
        })
    }
}

/// The error for `word` on `line`.
pub(crate) fn rerr(line: usize, word: &str, message: impl Into<String>) -> RulesError {
    RulesError {
        line,
        word: word.to_string(),
        message: message.into(),
        at: WordAt(Some((word.as_ptr() as usize, word.len()))),
    }
}

/// A number that names a rule, pipe, queue or scheduler: decimal digits only
/// (no sign, no `0x`), leading zeros allowed and read as decimal.
pub fn parse_decimal(w: &str) -> Option<u64> {
    if w.is_empty() || !w.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Only overflow can fail: the digits were checked.
    w.parse().ok()
}

/// A rule, pipe, queue or scheduler number (`what`): decimal, 1..65535.
pub(crate) fn object_number(line: usize, w: &str, what: &str) -> Result<u32, RulesError> {
    match parse_decimal(w) {
        Some(n @ 1..=65535) => Ok(n as u32),
        _ if w.starts_with("0x") || w.starts_with("0X") => Err(rerr(
            line,
            w,
            format!("a {what} number is decimal, 1..65535 (ipfw reads '{w}' as 0)"),
        )),
        _ => Err(rerr(line, w, format!("a {what} number is 1..65535"))),
    }
}

/// ipfw's syntax for values (strtoul base 0): decimal, 0x hex, leading-0
/// octal. Not for numbers that name things ([`parse_decimal`]).
pub(crate) fn parse_number(w: &str) -> Option<u64> {
    if let Some(h) = w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if w.len() > 1 && w.starts_with('0') {
        u64::from_str_radix(&w[1..], 8).ok()
    } else {
        w.parse().ok()
    }
}

//! The one rule for errors about what a file holds: an error names the file,
//! the line (and the word or column where the parser knows it) and what was
//! expected there, and never echoes the file's content.
//!
//! linkem may read a file with more rights than the user who named it (run by
//! root for a CNI runtime, under sudo, as the daemon a client talks to), so a
//! word quoted back from `/etc/shadow` would be a leak. The parsers of every
//! file kind (traces, schedules, distribution tables, profiles, rule files,
//! TOML configs, claim limits, recordings, mahimahi logs) say where and what
//! was expected; every message they produce about a file's text also passes
//! through [`hide_content`] with that text before it leaves the parser's
//! caller, so that a message that still quotes the file loses the quote.
//!
//! [`hide_content`] replaces, in a message about `text`:
//! - every piece between two quotes of the same kind (`'`, `` ` `` or `"`,
//!   consecutive occurrences, so a stray apostrophe cannot shift the pairs)
//!   that holds a letter or digit and occurs in `text` (a trailing `...` or
//!   `…` of a shortened quote is ignored when looking);
//! - every unquoted word (white-space separated, outer punctuation trimmed)
//!   of at least [`MIN_HIDDEN_WORD_BYTES`] bytes that occurs in `text` and is
//!   not a plain vocabulary word (lower-case letters and `-` only: the words
//!   a message is written in);
//!
//! by `<N bytes of the file>`. A quoted word that is not in the file (the
//! file's name, a keyword the message suggests) is kept.

/// Shortest unquoted word [`hide_content`] looks for in the file: shorter
/// ones are the numbers and units of the message itself ("line 3", "ms").
pub const MIN_HIDDEN_WORD_BYTES: usize = 4;

fn quote_worth_hiding(piece: &str, text: &str) -> bool {
    let inner = piece
        .strip_suffix("...")
        .or_else(|| piece.strip_suffix('…'))
        .unwrap_or(piece);
    inner.chars().any(char::is_alphanumeric) && text.contains(inner)
}

fn word_worth_hiding(word: &str, text: &str) -> bool {
    word.len() >= MIN_HIDDEN_WORD_BYTES
        && !word.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
        && text.contains(word)
}

/// `message` without any piece of `text`, the content of the file called
/// `name` (see the module doc); the quoted name itself is kept, as the user
/// gave it. Cheap for the short messages parsers write: it looks once per
/// quoted piece and word.
pub fn hide_content(message: &str, name: &str, text: &str) -> String {
    if text.is_empty() {
        return message.to_string();
    }
    // Byte ranges of `message` to replace, found first, merged, then cut out.
    let mut hide: Vec<(usize, usize)> = Vec::new();
    for q in ['\'', '`', '"'] {
        let at: Vec<usize> = message.match_indices(q).map(|(i, _)| i).collect();
        for pair in at.windows(2) {
            let piece = &message[pair[0] + 1..pair[1]];
            if piece != name && quote_worth_hiding(piece, text) {
                hide.push((pair[0], pair[1] + 1));
            }
        }
    }
    let trim: &[char] = &[
        ',', ';', ':', '.', '(', ')', '[', ']', '{', '}', '\'', '"', '`',
    ];
    let mut start = 0;
    for word in message.split_inclusive(char::is_whitespace) {
        let end = start + word.len();
        let bare = word.trim_end().trim_matches(trim);
        if !bare.is_empty() && word_worth_hiding(bare, text) {
            let offset = word.find(bare).unwrap_or(0);
            if bare == name {
                start = end;
                continue;
            }
            hide.push((start + offset, start + offset + bare.len()));
        }
        start = end;
    }
    if hide.is_empty() {
        return message.to_string();
    }
    hide.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (s, e) in hide {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    let mut out = String::with_capacity(message.len());
    let mut at = 0;
    for (s, e) in merged {
        out.push_str(&message[at..s]);
        out.push_str(&format!("<{} bytes of the file>", e - s));
        at = e;
    }
    out.push_str(&message[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "root:$6$S3cretHash/xyz:19000:0:99999:7:::\nsecond line\n";

    #[test]
    fn quoted_content_is_hidden_and_the_name_kept() {
        let m =
            "trace 'up.trace' line 1: 'root:$6$S3cretHash/xyz:19000:0:99999:7:::' is not a number";
        let got = hide_content(m, "up.trace", SECRET);
        assert!(!got.contains("S3cret") && !got.contains("root"), "{got}");
        assert!(got.starts_with("trace 'up.trace' line 1: <"), "{got}");
        assert!(got.ends_with("is not a number"), "{got}");
    }

    #[test]
    fn shortened_and_unquoted_content_is_hidden() {
        let m = "line 1: 'root:$6$S3cretHash...' and then root:$6$S3cretHash/xyz:19000:0:99999:7::: again";
        let got = hide_content(m, "up.trace", SECRET);
        assert!(!got.contains("S3cret"), "{got}");
        // Vocabulary and short numbers of the message stay.
        assert!(
            got.starts_with("line 1: <") && got.ends_with(" again"),
            "{got}"
        );
    }

    #[test]
    fn a_stray_apostrophe_does_not_shift_the_quotes() {
        let m = "the link's words: 'S3cretHash/xyz' is wrong";
        let got = hide_content(m, "up.trace", SECRET);
        assert!(!got.contains("S3cret"), "{got}");
        assert!(got.starts_with("the link's words"), "{got}");
    }

    #[test]
    fn keywords_not_in_the_file_stay() {
        let m = "schedule 's' line 2: expected 'TIME loop' or 'rate'";
        assert_eq!(hide_content(m, "s", "10s delay 5ms\n"), m);
    }
}

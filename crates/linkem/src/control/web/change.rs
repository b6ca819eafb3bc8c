//! `POST /api/change`: the body made into a control line ([`plan`]), run as
//! the emulator's starter would run it through the control socket
//! (the control server's `run_lines`: a session over a socket pair, so
//! the same parse, permission checks, refusals, counts and audit line), and
//! its reply's word position made relative to the words the page sent.
//!
//! Forms: `{"link":NAME|null,"verb":"link"|"replace","dir":"a-to-b"|"b-to-a"|"both",
//! "words":"delay 20ms"}` makes `VERB [NAME] DIR WORDS` (NAME where one socket
//! serves several links); `{"line":"pipe 1 config bw 10Mbit/s"}` is any change
//! line as given.

use crate::control::looks_like_change;
use serde_json::{json, Value};

/// The line a change body asks for, and the 1-based place in it of the
/// first of the body's `words` (None for a `line`).
#[derive(Debug, PartialEq, Eq)]
pub struct Planned {
    pub line: String,
    pub first_word: Option<usize>,
}

/// Makes the line of `body`; `group`: the socket serves several links
/// (the link is named first); `name`: the one link's name otherwise.
/// Err: why the body is not a change (answered 400).
pub fn plan(body: &Value, group: bool, name: &str) -> Result<Planned, String> {
    if let Some(line) = body.get("line") {
        let line = line.as_str().ok_or("'line' must be a string")?;
        let line = one_line(line, "line")?;
        if !looks_like_change(&line) {
            return Err(format!(
                "'{line}' changes nothing: only change lines (link, replace, zero, pipe, queue, \
                 sched, add, delete, flush, set) are taken here"
            ));
        }
        return Ok(Planned {
            line,
            first_word: None,
        });
    }
    let field = |k: &str| -> Result<&str, String> {
        body.get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("give '{k}' (a string), or 'line'"))
    };
    let verb = field("verb")?;
    if !matches!(verb, "link" | "replace") {
        return Err(format!("'verb' is 'link' or 'replace', not '{verb}'"));
    }
    let dir = field("dir")?;
    if !matches!(dir, "a-to-b" | "b-to-a" | "both") {
        return Err(format!(
            "'dir' is 'a-to-b', 'b-to-a' or 'both', not '{dir}'"
        ));
    }
    let words = one_line(field("words")?, "words")?;
    if words.is_empty() {
        return Err("'words' is empty: give the link words to change".into());
    }
    let link = match body.get("link") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(one_line(s, "link")?),
        Some(_) => return Err("'link' must be a string or null".into()),
    };
    let mut line = vec![verb.to_string()];
    match (group, link) {
        (true, Some(l)) => line.push(l),
        (true, None) => return Err("this emulator serves several links: name one in 'link'".into()),
        (false, Some(l)) if l != name => {
            return Err(format!("no link '{l}' (this one is '{name}')"))
        }
        (false, _) => {}
    }
    line.push(dir.to_string());
    let first_word = line.len() + 1;
    line.push(words);
    Ok(Planned {
        line: line.join(" "),
        first_word: Some(first_word),
    })
}

/// `text`'s words joined by single blanks (so positions count words); a
/// line break or other control character would end the line early.
fn one_line(text: &str, what: &str) -> Result<String, String> {
    if text.chars().any(char::is_control) {
        return Err(format!(
            "'{what}' holds a control character (one line only)"
        ));
    }
    Ok(text.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// The page's reply: the control reply with the line and, for a refused
/// word, `position` counted in the body's words (`line_position` in the line).
pub fn reply(mut reply: Value, planned: &Planned) -> Value {
    reply["line"] = json!(planned.line);
    if let Some(p) = reply.get("position").and_then(Value::as_u64) {
        reply["line_position"] = json!(p);
        if let Some(first) = planned.first_word {
            let first = first as u64;
            reply["position"] = if p >= first {
                json!(p - first + 1)
            } else {
                Value::Null
            };
        }
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_make_a_line() {
        let b = json!({"link": null, "verb": "link", "dir": "a-to-b", "words": " delay  20ms "});
        let p = plan(&b, false, "va-vb").unwrap();
        assert_eq!(p.line, "link a-to-b delay 20ms");
        assert_eq!(p.first_word, Some(3));
        let b = json!({"link": "h1:eth1--r1:eth1", "verb": "replace", "dir": "both", "words": "rate 10Mbit/s"});
        let p = plan(&b, true, "lab1").unwrap();
        assert_eq!(p.line, "replace h1:eth1--r1:eth1 both rate 10Mbit/s");
        assert_eq!(p.first_word, Some(4));
        let b = json!({"link": "va-vb", "verb": "link", "dir": "b-to-a", "words": "loss 1%"});
        assert_eq!(
            plan(&b, false, "va-vb").unwrap().line,
            "link b-to-a loss 1%"
        );
    }

    #[test]
    fn bad_bodies_are_named() {
        let bad = [
            (
                json!({"verb": "zero", "dir": "both", "words": "x"}),
                "'verb'",
            ),
            (json!({"verb": "link", "dir": "up", "words": "x"}), "'dir'"),
            (
                json!({"verb": "link", "dir": "both", "words": "delay 1ms\nzero"}),
                "control character",
            ),
            (
                json!({"verb": "link", "dir": "both", "words": "  "}),
                "empty",
            ),
            (json!({"verb": "link", "dir": "both"}), "'words'"),
            (
                json!({"link": "other", "verb": "link", "dir": "both", "words": "delay 1ms"}),
                "no link 'other'",
            ),
            (json!({"line": "show"}), "changes nothing"),
            (json!({"line": "link delay 1ms\nzero"}), "control character"),
            (json!({"line": 3}), "'line' must be"),
        ];
        for (body, said) in bad {
            let e = plan(&body, false, "va-vb").unwrap_err();
            assert!(e.contains(said), "{body}: {e}");
        }
        let e = plan(
            &json!({"verb": "link", "dir": "both", "words": "delay 1ms"}),
            true,
            "g",
        )
        .unwrap_err();
        assert!(e.contains("name one in 'link'"), "{e}");
        let p = plan(&json!({"line": "pipe 1 config bw 10Mbit/s"}), true, "g").unwrap();
        assert_eq!(
            (p.line.as_str(), p.first_word),
            ("pipe 1 config bw 10Mbit/s", None)
        );
    }

    #[test]
    fn a_refused_word_is_placed_in_the_words() {
        let p = plan(
            &json!({"verb": "link", "dir": "a-to-b", "words": "delay 20xs"}),
            false,
            "x",
        )
        .unwrap();
        let r = reply(
            json!({"ok": false, "error": "bad", "word": "20xs", "position": 4}),
            &p,
        );
        assert_eq!(r["position"], 2);
        assert_eq!(r["line_position"], 4);
        assert_eq!(r["word"], "20xs");
        assert_eq!(r["line"], "link a-to-b delay 20xs");
        let p = Planned {
            line: "pipe 1 config bw 1x".into(),
            first_word: None,
        };
        let r = reply(json!({"ok": false, "position": 5}), &p);
        assert_eq!(
            (r["position"].as_u64(), r["line_position"].as_u64()),
            (Some(5), Some(5))
        );
        let r = reply(json!({"ok": true, "at_ns": 7}), &p);
        assert_eq!(r["at_ns"], 7);
        assert!(r.get("line_position").is_none());
    }
}

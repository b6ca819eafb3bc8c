//! Link words from a TOML file: keys are the words, values their arguments.

/// Link words read from a TOML file: keys are the words, values their
/// arguments. Tables `a-to-b` and `b-to-a` hold words for one direction only.
///
/// ```toml
/// rate = "10mbit"
/// delay = "20ms 2ms 25%"
/// loss = "gemodel 1% 30%"
/// queue = 100
/// seed = 7
/// [b-to-a]
/// rate = "1mbit"
/// ```
///
/// An array of tables `[[schedule]]` (or `[[a-to-b.schedule]]`) is a schedule
/// written inline ([`super::schedule`]): it becomes the words `schedule
/// [[schedule]]` and the text of that name in [`TomlWords::files`], which the
/// caller's file loader serves first (and a recording copies, as it copies a
/// schedule file). `schedule = "FILE"` names a file as the word does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TomlWords {
    /// Words of the top level: both directions.
    pub both: Vec<String>,
    /// Words of the `[a-to-b]` table.
    pub a_to_b: Vec<String>,
    /// Words of the `[b-to-a]` table.
    pub b_to_a: Vec<String>,
    /// Schedules written inline, by the name their `schedule` word gives:
    /// (name, text of the line form).
    pub files: Vec<(String, String)>,
}

impl TomlWords {
    /// Everything the config gave (its words and inline schedules), for
    /// `crate::filetext::hide_content`: an error about these words comes from
    /// the config's content and must not quote it.
    pub fn content(&self) -> String {
        let words = [&self.both, &self.a_to_b, &self.b_to_a];
        let mut text = words
            .iter()
            .flat_map(|w| w.iter())
            .fold(String::new(), |t, w| t + w + " ");
        for (name, lines) in &self.files {
            text.push_str(name);
            text.push('\n');
            text.push_str(lines);
        }
        text
    }

    /// Reads a TOML file's text into words; an error names the key.
    pub fn parse(text: &str) -> Result<TomlWords, String> {
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| toml_error(text, &e))?;
        let mut out = TomlWords::default();
        for (key, value) in &table {
            match (key.as_str(), value) {
                ("a-to-b" | "b-to-a", toml::Value::Table(t)) => {
                    let mut words = Vec::new();
                    for (k, v) in t {
                        let path = format!("{key}.{k}");
                        out.push(&mut words, &path, k, v)?;
                    }
                    if key == "a-to-b" {
                        out.a_to_b = words;
                    } else {
                        out.b_to_a = words;
                    }
                }
                _ => {
                    let mut words = std::mem::take(&mut out.both);
                    out.push(&mut words, key, key, value)?;
                    out.both = words;
                }
            }
        }
        Ok(out)
    }

    /// The text of an inline schedule by the name its word gives, if it is one.
    pub fn file(&self, name: &str) -> Option<&str> {
        self.files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.as_str())
    }

    /// The words of one key, an inline schedule's text kept in `files`.
    fn push(
        &mut self,
        words: &mut Vec<String>,
        path: &str,
        key: &str,
        value: &toml::Value,
    ) -> Result<(), String> {
        match value {
            toml::Value::Array(rows) if key == "schedule" && rows.iter().any(|r| r.is_table()) => {
                let name = format!("[[{path}]]");
                let text = super::schedule::toml_rows(path, rows)?;
                words.extend(["schedule".to_string(), name.clone()]);
                self.files.push((name, text));
                Ok(())
            }
            _ => push_words(words, path, key, value),
        }
    }
}

fn push_words(
    words: &mut Vec<String>,
    path: &str,
    key: &str,
    value: &toml::Value,
) -> Result<(), String> {
    words.push(key.to_string());
    match value {
        toml::Value::String(s) => {
            if s.split_whitespace().next().is_none() {
                return Err(format!("key '{path}': empty value"));
            }
            words.extend(s.split_whitespace().map(str::to_string));
        }
        toml::Value::Integer(i) if *i >= 0 => words.push(i.to_string()),
        toml::Value::Float(x) if *x >= 0.0 => words.push(x.to_string()),
        toml::Value::Array(items) => {
            for item in items {
                match item {
                    toml::Value::String(s) => {
                        words.extend(s.split_whitespace().map(str::to_string))
                    }
                    toml::Value::Integer(i) if *i >= 0 => words.push(i.to_string()),
                    _ => {
                        return Err(format!(
                            "key '{path}': array items are strings or whole numbers"
                        ))
                    }
                }
            }
        }
        _ => {
            return Err(format!(
                "key '{path}': expected a string such as \"10ms\", a number or an array, found {}",
                value.type_str()
            ))
        }
    }
    Ok(())
}

/// A TOML syntax error as line, column and reason, never the offending line itself:
/// the file may not be a config at all (`--config /etc/shadow`).
pub fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let reason = e.message().trim_end();
    match e.span() {
        Some(span) => {
            let before = &text.as_bytes()[..span.start.min(text.len())];
            let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
            let column = 1 + before.iter().rev().take_while(|&&b| b != b'\n').count();
            format!("line {line}, column {column}: {reason}")
        }
        None => reason.to_string(),
    }
}

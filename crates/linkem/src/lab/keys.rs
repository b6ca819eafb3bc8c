//! Reading a YAML mapping key by key: every key is either one this reader
//! knows, one of Containerlab's that linkem accepts and does not use (a
//! warning), or unknown. An unknown key that looks like a known one (a typo,
//! another case, `_` for `-`) is an error naming both; any other unknown key
//! is kept out with a warning, so that a Containerlab file runs as it is.

use anyhow::{bail, Result};
use serde_yaml::{Mapping, Value};

/// The keys of one mapping: `known` are read by the caller, `ignored` are
/// Containerlab's keys linkem accepts without using them.
pub(super) struct Keys<'a> {
    pub known: &'a [&'a str],
    pub ignored: &'a [&'a str],
}

impl Keys<'_> {
    /// Checks every key of `map` (called `what` in messages); pushes a
    /// warning for each key linkem does not use.
    pub(super) fn check(
        &self,
        map: &Mapping,
        what: &str,
        warnings: &mut Vec<String>,
    ) -> Result<()> {
        for key in map.keys() {
            let Some(key) = key.as_str() else {
                bail!("{what}: a key is not a string ({})", scalar_text(key));
            };
            if self.known.contains(&key) {
                continue;
            }
            if self.ignored.contains(&key) {
                warnings.push(format!("{what}: '{key}' is not used by linkem (ignored)"));
                continue;
            }
            if let Some(near) = self.known.iter().find(|k| looks_like(key, k)) {
                bail!("{what}: unknown key '{key}' (did you mean '{near}'?)");
            }
            warnings.push(format!("{what}: unknown key '{key}' (ignored)"));
        }
        Ok(())
    }
}

/// A typo of `known`: equal but for case and `_`/`-`, or at most two edits
/// away for keys long enough that two edits do not make another word.
pub(super) fn looks_like(key: &str, known: &str) -> bool {
    let fold = |s: &str| s.to_ascii_lowercase().replace('_', "-");
    let (k, n) = (fold(key), fold(known));
    if k == n {
        return true;
    }
    let allowed = match n.len() {
        0..=3 => 0,
        4..=5 => 1,
        _ => 2,
    };
    allowed > 0 && edits(&k, &n) <= allowed
}

/// Edits between `a` and `b`: insertions, deletions, substitutions and swaps
/// of two neighbours (the optimal string alignment distance; keys are short).
fn edits(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    d[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// A scalar as text (a number or a bool as YAML wrote it), for words and
/// messages; a mapping or a list is `None`.
pub(super) fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A short description of any value, for an error message.
pub(super) fn scalar_text(value: &Value) -> String {
    match value {
        Value::Null => "nothing".to_string(),
        Value::Sequence(_) => "a list".to_string(),
        Value::Mapping(_) => "a mapping".to_string(),
        Value::Tagged(_) => "a tagged value".to_string(),
        other => format!("'{}'", scalar(other).unwrap_or_default()),
    }
}

/// `map[key]` as a string, or an error naming `what` and the key.
pub(super) fn string(map: &Mapping, key: &str, what: &str) -> Result<Option<String>> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match scalar(v) {
            Some(s) => Ok(Some(s)),
            None => bail!("{what}: '{key}' must be a string, not {}", scalar_text(v)),
        },
    }
}

/// `map[key]` as a mapping (absent or empty: an empty one).
pub(super) fn mapping<'a>(map: &'a Mapping, key: &str, what: &str) -> Result<Option<&'a Mapping>> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Mapping(m)) => Ok(Some(m)),
        Some(v) => bail!("{what}: '{key}' must be a mapping, not {}", scalar_text(v)),
    }
}

/// Words from a string (split at white space) or a list of strings.
pub(super) fn words(value: &Value, what: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let items: Vec<&Value> = match value {
        Value::Null => Vec::new(),
        Value::Sequence(items) => items.iter().collect(),
        other => vec![other],
    };
    for item in items {
        match scalar(item) {
            Some(s) => out.extend(s.split_whitespace().map(str::to_string)),
            None => bail!(
                "{what}: link words must be a string or a list of strings, not {}",
                scalar_text(item)
            ),
        }
    }
    Ok(out)
}

/// A list of strings (a single string is a list of one), as Containerlab's `exec`.
pub(super) fn strings(value: &Value, what: &str) -> Result<Vec<String>> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Sequence(items) => items
            .iter()
            .map(|v| {
                scalar(v).ok_or_else(|| {
                    anyhow::anyhow!("{what}: each item must be a string, not {}", scalar_text(v))
                })
            })
            .collect(),
        other => match scalar(other) {
            Some(s) => Ok(vec![s]),
            None => bail!(
                "{what}: must be a list of strings, not {}",
                scalar_text(other)
            ),
        },
    }
}

/// A mapping of strings to strings (labels, env).
pub(super) fn string_map(
    value: &Value,
    what: &str,
) -> Result<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    match value {
        Value::Null => {}
        Value::Mapping(m) => {
            for (k, v) in m {
                let (Some(k), Some(v)) = (scalar(k), scalar(v).or(v.is_null().then(String::new)))
                else {
                    bail!("{what}: each entry must be KEY: VALUE with strings");
                };
                out.insert(k, v);
            }
        }
        other => bail!("{what}: must be a mapping, not {}", scalar_text(other)),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_are_near_their_key() {
        assert!(looks_like("impiar", "impair"));
        assert!(looks_like("A_TO_B", "a-to-b"));
        assert!(looks_like("shedule", "schedule"));
        assert!(looks_like("exce", "exec"));
        assert!(!looks_like("vars", "rules"));
        assert!(!looks_like("env", "exec"));
        assert!(!looks_like("mtu", "seed"));
    }

    #[test]
    fn unknown_keys_warn_and_typos_fail() {
        let map: Mapping = serde_yaml::from_str("impair: x\nfoo: 1\nvars: {}\n").unwrap();
        let keys = Keys {
            known: &["impair"],
            ignored: &["vars"],
        };
        let mut warnings = Vec::new();
        keys.check(&map, "link L", &mut warnings).unwrap();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        let map: Mapping = serde_yaml::from_str("impar: x\n").unwrap();
        let e = keys.check(&map, "link L", &mut warnings).unwrap_err();
        assert_eq!(
            e.to_string(),
            "link L: unknown key 'impar' (did you mean 'impair'?)"
        );
    }
}

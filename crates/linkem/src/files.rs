//! The files a run reads besides its capture: distribution and profile
//! tables named in link words or rules (a path, or an iproute2 table name),
//! `--config` TOML files of link words or `rules`, and rule files. Each is
//! read as every small input is (`linkem_io::infile`: a regular file of at
//! most 16 MiB), and an error names the file and what was looked for, never
//! the content of a file the user who started linkem may not read.

use anyhow::{bail, Context, Result};
use linkem_core::config::toml::toml_error;
use linkem_core::filetext;
use linkem_core::rules::{parse_rules, RuleSet};
use linkem_core::{Dialect, LinkSpec, TomlWords};
use linkem_io::infile;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Reads a file named in the link words or rules (a distribution, a profile):
/// a path, or a netem table name installed by iproute2
/// (`/usr/lib/tc/NAME.dist`). Read as every small input is
/// (`linkem_io::infile`): a regular file of at most 16 MiB. The error names
/// what was looked for; the word that named the file adds which kind it is.
pub fn load_distribution(name: &str) -> Result<String, String> {
    read_distribution(name, &mut Vec::new())
}

/// [`load_distribution`], adding the path it read to `read` (a replay must not
/// write its output over a table it read).
pub fn read_distribution(name: &str, read: &mut Vec<PathBuf>) -> Result<String, String> {
    let text = |p: &Path| infile::read_text(p, infile::MAX_TEXT_BYTES);
    match text(Path::new(name)) {
        Ok(t) => {
            read.push(PathBuf::from(name));
            return Ok(t);
        }
        Err(e) if !e.is_not_found() || name.contains('/') => return Err(e.to_string()),
        Err(_) => {}
    }
    for dir in ["/usr/lib/tc", "/usr/lib64/tc", "/usr/local/lib/tc"] {
        let p = Path::new(dir).join(format!("{name}.dist"));
        match text(&p) {
            Ok(t) => {
                read.push(p);
                return Ok(t);
            }
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!(
        "'{name}': no such file, nor /usr/lib/tc/{name}.dist (iproute2's tables)"
    ))
}

/// The link words of a TOML config file (`--config`), read as every small input is.
/// Errors name the file and the line and column, never the file's content.
pub fn config_words(path: &Path) -> Result<TomlWords> {
    let text = infile::read_text(path, infile::MAX_TEXT_BYTES)
        .map_err(|e| anyhow::anyhow!("--config {e}"))?;
    TomlWords::parse(&text).map_err(|e| {
        let name = path.display().to_string();
        let message = filetext::hide_content(&e.to_string(), &name, &text);
        anyhow::anyhow!("--config {name}: {message}")
    })
}

/// Link words from an optional TOML file (`both`, then `a-to-b`) and then the
/// command line's, each a layer that overrides the one before, parsed into a spec.
pub fn link_spec(config: Option<&Path>, words: &[String]) -> Result<LinkSpec> {
    link_spec_reading(config, words, &mut Vec::new())
}

/// [`link_spec`], adding the distribution tables the words read to `read`.
pub fn link_spec_reading(
    config: Option<&Path>,
    words: &[String],
    read: &mut Vec<PathBuf>,
) -> Result<LinkSpec> {
    let mut layers: Vec<Vec<String>> = Vec::new();
    let mut toml = TomlWords::default();
    if let Some(path) = config {
        toml = config_words(path)?;
        layers.push(toml.both.clone());
        layers.push(toml.a_to_b.clone());
    }
    layers.push(
        words
            .iter()
            .flat_map(|w| w.split_whitespace().map(str::to_string))
            .collect(),
    );
    let layers: Vec<&[String]> = layers.iter().map(Vec::as_slice).collect();
    LinkSpec::parse_layers(
        &layers,
        Dialect::Linkem,
        &mut |name: &str| match toml.file(name) {
            Some(text) => Ok(text.to_string()),
            None => read_distribution(name, read),
        },
    )
    .map_err(|e| {
        let message = filetext::hide_content(&e.to_string(), "", &toml.content());
        anyhow::anyhow!("link words: {message}")
    })
}

/// The rule text from a rule file or a config's `rules` key (not both), and the
/// seed from the config's `seed` or the words `seed N`, the only link words
/// allowed beside rules (replay and bridge alike). `None` when neither holds rules.
pub fn rules_source(
    config: Option<&Path>,
    file: Option<&Path>,
    words: &[String],
) -> Result<Option<(String, Option<u64>)>> {
    rules_source_or(config, file, words, None)
}

/// [`rules_source`], with `default` as the rule text when neither the config nor
/// a file gives one (a node started for port claims alone: `flush`).
pub fn rules_source_or(
    config: Option<&Path>,
    file: Option<&Path>,
    words: &[String],
    default: Option<&str>,
) -> Result<Option<(String, Option<u64>)>> {
    let mut text = None;
    let mut seed = None;
    if let Some(path) = config {
        let raw = read_small("--config", path)?;
        let table: toml::Table = raw.parse().map_err(|e: toml::de::Error| {
            let name = path.display().to_string();
            let message = filetext::hide_content(&toml_error(&raw, &e), &name, &raw);
            anyhow::anyhow!("--config {name}: {message}")
        })?;
        if let Some(v) = table.get("rules") {
            let Some(s) = v.as_str() else {
                bail!(
                    "{}: 'rules' is a string of rule lines (rules = \"\"\"...\"\"\")",
                    path.display()
                );
            };
            text = Some(s.to_string());
            for (k, v) in &table {
                match k.as_str() {
                    "rules" => {}
                    "seed" => {
                        seed = Some(v.as_integer().filter(|i| *i >= 0).ok_or_else(|| {
                            anyhow::anyhow!("{}: seed is a whole number", path.display())
                        })? as u64)
                    }
                    _ => bail!(
                        "{}: '{k}': with rules, link words go in 'pipe N config' lines",
                        path.display()
                    ),
                }
            }
        }
    }
    if let Some(path) = file {
        if text.is_some() {
            bail!("rules given twice: --rules and the config's 'rules' key");
        }
        text = Some(read_small("--rules", path)?);
    }
    let Some(text) = text.or(default.map(str::to_string)) else {
        return Ok(None);
    };
    // A half-written file must not silently remove all emulation.
    if !linkem_core::rules::says_something(&text) {
        let from = match file {
            Some(p) => format!("--rules {}", p.display()),
            None => "the config's 'rules'".into(),
        };
        bail!(
            "{from}: no rule, pipe or 'flush' line: an empty rule set would pass every \
             packet unimpaired (write 'flush' to run one on purpose)"
        );
    }
    let words: Vec<&str> = words.iter().flat_map(|w| w.split_whitespace()).collect();
    match words.as_slice() {
        [] => {}
        ["seed", n] => {
            if seed.is_some() {
                bail!("seed given twice (config and command line)");
            }
            seed = Some(n.parse().with_context(|| format!("seed '{n}' is not a whole number"))?)
        }
        [w, ..] => bail!("'{w}': with --rules, link words go in 'pipe N config' lines (only 'seed N' is allowed here)"),
    }
    Ok(Some((text, seed)))
}

/// Whether a TOML config holds a `rules` key. A config that cannot be read or
/// parsed is reported by the path that reads it for link words; here it only
/// means "no rules".
pub fn config_has_rules(path: &Path) -> bool {
    infile::read_text(path, infile::MAX_TEXT_BYTES)
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .is_some_and(|t| t.contains_key("rules"))
}

/// A rule file or config, read as every small input is (`linkem_io::infile`): a
/// regular file of bounded size, so `/dev/zero` or a FIFO is an error at once.
fn read_small(what: &str, path: &Path) -> Result<String> {
    infile::read_text(path, infile::MAX_TEXT_BYTES).map_err(|e| anyhow::anyhow!("{what} {e}"))
}

/// Parses a rule file, reading `profile` and `distribution` files relative to
/// `base` (the rule file's directory) or as given.
/// `sides`: the names `recv`/`xmit`/`via` accept for IF_A and IF_B besides `a` and `b`.
pub fn load_rules(text: &str, base: Option<&Path>, sides: [&str; 2]) -> Result<RuleSet> {
    load_rules_recording(text, None, base, sides, &mut Default::default())
}

/// [`load_rules`], keeping each file read by the name the rules gave it.
/// `text_file`: the file the rule text came from (`--rules` or `--config`), for
/// what an error may quote ([`load_rules_reading`]).
pub fn load_rules_recording(
    text: &str,
    text_file: Option<&Path>,
    base: Option<&Path>,
    sides: [&str; 2],
    read_files: &mut HashMap<String, String>,
) -> Result<RuleSet> {
    load_rules_reading(text, text_file, base, sides, read_files, &mut Vec::new())
}

/// [`load_rules_recording`], adding the path of every file the rules read to
/// `paths` (a replay must not write over one). An error quotes nothing of the
/// rule text nor of a file it names (`linkem_core::filetext`): it says the
/// line and what was expected there.
pub fn load_rules_reading(
    text: &str,
    text_file: Option<&Path>,
    base: Option<&Path>,
    sides: [&str; 2],
    read_files: &mut HashMap<String, String>,
    paths: &mut Vec<PathBuf>,
) -> Result<RuleSet> {
    // (name as the words gave it, text): every file the message may not quote.
    let mut hidden: Vec<(String, String)> = Vec::new();
    let text_name = text_file
        .map(|f| f.display().to_string())
        .unwrap_or_default();
    hidden.push((text_name, text.to_string()));
    let parsed = {
        let mut files = |name: &str| -> Result<String, String> {
            let mut got = |path: PathBuf, t: String| {
                hidden.push((name.to_string(), t.clone()));
                paths.push(path);
                read_files.insert(name.to_string(), t.clone());
                t
            };
            if let Some(b) = base {
                let p = b.join(name);
                match infile::read_text(&p, infile::MAX_TEXT_BYTES) {
                    Ok(t) => return Ok(got(p, t)),
                    Err(e) if !e.is_not_found() => return Err(e.to_string()),
                    Err(_) => {}
                }
            }
            let mut read = Vec::new();
            let t = read_distribution(name, &mut read)?;
            match read.pop() {
                Some(p) => Ok(got(p, t)),
                None => Ok(t),
            }
        };
        parse_rules(text, sides, &mut files)
    };
    parsed.map_err(|e| {
        // The word's position on its line, from where the parser found it: the
        // message may not show the word itself.
        let words: Vec<&str> = text
            .lines()
            .nth(e.line.wrapping_sub(1))
            .map(|l| l.split_whitespace().collect())
            .unwrap_or_default();
        let shown = match e.position_in(&words) {
            Some(k) => format!(
                "line {}, word {}: '{}': {}",
                e.line,
                k + 1,
                e.word,
                e.message
            ),
            None => e.to_string(),
        };
        let message = hidden
            .iter()
            .fold(shown, |m, (name, t)| filetext::hide_content(&m, name, t));
        anyhow::anyhow!("rules: {message}")
    })
}

//! Schedules: a link that changes at given instants (`schedule FILE`).
//!
//! # The file
//! One change per line, `#` starts a comment, blank lines are skipped:
//!
//! ```text
//! 0s    rate 10mbit delay 20ms
//! 30s   rate 1mbit                  # a step: from 30 s the rate is 1 Mbit/s
//! ramp   40s 50s 1s  rate 1mbit 10mbit   # every 1 s from 40 s to 50 s, linearly
//! square 60s 80s 2s  delay 10ms 50ms     # 1 s at 10 ms, 1 s at 50 ms, ... until 80 s
//! walk   80s 90s 100ms delay 20ms 5ms 50ms 1ms seed 7  # random walk: start, min, max, step σ
//! 100s  loop                        # start again from 0 s every 100 s
//! ```
//!
//! - `TIME WORDS`: at TIME (from the schedule's start), WORDS apply as a
//!   layer over the link's own words and every earlier line: what they set
//!   replaces, the rest stays.
//! - `ramp FROM TO STEP WORD A B`: at FROM, FROM + STEP, ... ≤ TO, WORD (`rate`,
//!   `delay` or `loss`) takes A + (B − A)·(t − FROM)/(TO − FROM).
//! - `square FROM TO PERIOD WORD A B`: WORD is A for the first half of each
//!   period from FROM, B for the second, until TO.
//! - `walk FROM TO STEP WORD START MIN MAX SIGMA seed N`: at each step WORD
//!   moves by a normal step of standard deviation SIGMA (a seeded stream of
//!   its own, so the same file gives the same walk), kept within [MIN, MAX].
//! - `TIME loop`: the schedule starts again every TIME (the last line); without
//!   it the schedule plays once and the last change stays. A loop replays the
//!   changes: until the next loop's first change the link keeps the last one
//!   (a `0s` line sets where each loop starts).
//!
//! # Two more forms
//! The same changes can be written two other ways; each makes the same
//! [`RawChange`]s as the lines that say the same (a unit test holds the
//! three to one typed [`Schedule`]):
//!
//! - **TOML**, in the link config (`--config FILE`): an array of tables, one
//!   per line of the file above, read by [`toml_rows`]:
//!
//!   ```toml
//!   [[schedule]]
//!   at = "0s"
//!   rate = "10mbit"
//!   delay = "20ms"
//!   [[schedule]]
//!   ramp = "40s 50s 1s rate 1mbit 10mbit"   # a shape: ramp, square or walk
//!   [[schedule]]
//!   at = "100s"
//!   loop = true
//!   ```
//!
//!   A row has `at` and link words as keys (values as in the config's top
//!   level), or one shape key, or `at` and `loop = true` (the last row).
//!   `[[a-to-b.schedule]]` / `[[b-to-a.schedule]]` give one direction's.
//! - **CSV**, `schedule FILE.csv` ([`read_csv`]): TheaterQ's trace rows,
//!   each kept for KEEP µs, then the next:
//!
//!   ```text
//!   KEEP_US,LATENCY_NS,RATE_BPS,LOSS,LIMIT                                      (simple)
//!   KEEP_US,LATENCY_NS,JITTER_NS,RATE_BPS,LOSS,LIMIT,DUP_PROB,DUP_DELAY_NS[,ROUTE_ID] (extended)
//!   ```
//!
//!   Row k applies at Σ_{j<k} KEEP_j µs as `delay LATENCYns [JITTERns
//!   distribution normal] rate RATEbit loss P% queue LIMIT [duplicate D%]`,
//!   with LOSS and DUP_PROB TheaterQ's scaled integers (P = LOSS / (2³² − 1)
//!   · 100); every row sets every column, so a row never inherits one. A
//!   line that starts with a letter or `#` is a header or a comment and is
//!   skipped (as TheaterQ skips it), except a line `loop`: the rows then
//!   loop every Σ KEEP; without it they play once and the last row stays
//!   (TheaterQ's `cont_mode HOLD`). Columns linkem cannot emulate are
//!   refused when not zero: RATE 0 (TheaterQ's no rate: a schedule cannot
//!   lift a rate), DUP_DELAY and ROUTE_ID.
//!
//! Errors name the file, the row (CSV: its line; TOML: its index from 1)
//! and the field.
//!
//! Times never go backwards from one line to the next (a shape counts by its
//! FROM and ends at its TO). The schedule starts where a trace does: at the
//! link's start live ([`crate::Link::start_at`], kept by a recording), at
//! its first packet in a replay of a capture, or at the change that gave the
//! link its schedule.
//! Every change is a whole link configuration, made once when the words are
//! read; the link applies change k at start + loop·period + at_k exactly,
//! before any packet that arrives at or after that instant, so replay and live
//! runs decide alike.

use super::LinkConfig;
use crate::rng::{Stream, StreamId};
use crate::units;
use std::sync::Arc;

/// Most changes one schedule may expand to.
pub const MAX_CHANGES: usize = 100_000;

/// A parsed schedule: each change's instant and the whole link it makes.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// The file's name as the words gave it.
    pub name: String,
    /// (ns from the schedule's start, the link from then on), in time order.
    pub changes: Vec<(u64, Arc<LinkConfig>)>,
    /// `TIME loop`: the period; `None`: played once.
    pub period_ns: Option<u64>,
}

/// One line of a schedule before it is resolved against the link's words:
/// its instant, its words and the file line it came from.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RawChange {
    pub at_ns: u64,
    pub words: Vec<String>,
    pub line: usize,
}

/// The lines of a schedule file, expanded (shapes become steps), checked for
/// order. Errors: `schedule 'F' line L: problem`.
pub(super) fn read_lines(name: &str, text: &str) -> Result<(Vec<RawChange>, Option<u64>), String> {
    let mut out: Vec<RawChange> = Vec::new();
    let mut period = None;
    let mut last_ns = 0;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let err = |m: String| format!("schedule '{name}' line {n}: {m}");
        let line = raw.split('#').next().unwrap_or("");
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(&first) = words.first() else {
            continue;
        };
        if period.is_some() {
            return Err(err("nothing may follow the 'TIME loop' line".into()));
        }
        let (from_ns, expanded) = match first {
            "ramp" | "square" | "walk" => shape(first, &words[1..]).map_err(&err)?,
            _ => {
                let at = units::parse_time_ns(first).map_err(|e| {
                    err(format!(
                        "'{first}': {} (a line is 'TIME WORDS' or a shape)",
                        e.0
                    ))
                })?;
                if words.len() == 1 {
                    return Err(err(format!("no words after {first}")));
                }
                if words[1..] == ["loop"] {
                    if at == 0 || at < last_ns {
                        return Err(err(format!(
                            "the loop's period {first} must be above 0 and not before the last change"
                        )));
                    }
                    period = Some(at);
                    continue;
                }
                let words = words[1..].iter().map(|w| w.to_string()).collect();
                (at, vec![(at, words)])
            }
        };
        if from_ns < last_ns {
            return Err(err(format!(
                "{} is before the line above ({}): times never go backwards",
                units::format_time_ns(from_ns),
                units::format_time_ns(last_ns)
            )));
        }
        for (at_ns, words) in expanded {
            if words
                .iter()
                .any(|w| w.starts_with("schedule") || w == "seed")
            {
                return Err(err(
                    "a schedule line sets the link, not a schedule or a seed".into(),
                ));
            }
            last_ns = at_ns;
            out.push(RawChange {
                at_ns,
                words,
                line: n,
            });
            if out.len() > MAX_CHANGES {
                return Err(err(format!("more than {MAX_CHANGES} changes")));
            }
        }
    }
    if out.is_empty() {
        return Err(format!(
            "schedule '{name}': no changes (the file has no lines)"
        ));
    }
    Ok((out, period))
}

/// TheaterQ's columns, as errors name them.
const CSV_SIMPLE: [&str; 5] = ["keep_us", "latency_ns", "rate_bps", "loss", "limit"];
const CSV_EXTENDED: [&str; 9] = [
    "keep_us",
    "latency_ns",
    "jitter_ns",
    "rate_bps",
    "loss",
    "limit",
    "dup_prob",
    "dup_delay_ns",
    "route_id",
];

/// A scaled probability of TheaterQ (0 = 0 %, 2³² − 1 = 100 %) as a percentage word.
fn scaled_percent(v: u64) -> Result<String, String> {
    if v > u64::from(u32::MAX) {
        return Err(format!("{v} is above {} (100 %)", u32::MAX));
    }
    Ok(format!("{}%", v as f64 / f64::from(u32::MAX) * 100.0))
}

/// The rows of a CSV schedule (TheaterQ's trace file; module doc), as
/// changes. Errors: `schedule 'F' line L (row R) field 'NAME': problem`.
pub(super) fn read_csv(name: &str, text: &str) -> Result<(Vec<RawChange>, Option<u64>), String> {
    let mut out: Vec<RawChange> = Vec::new();
    let mut looped = false;
    let mut at_ns: u64 = 0;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line == "loop" {
            looped = true;
            continue;
        }
        if !line.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let row = out.len() + 1;
        let err = |m: String| format!("schedule '{name}' line {n} (row {row}): {m}");
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let columns: &[&str] = match cells.len() {
            5 => &CSV_SIMPLE,
            8 => &CSV_EXTENDED[..8],
            9 => &CSV_EXTENDED,
            k => {
                return Err(err(format!(
                    "{k} fields; a row has 5 ({}) or 8 to 9 ({})",
                    CSV_SIMPLE.join(","),
                    CSV_EXTENDED.join(",")
                )))
            }
        };
        let mut v = std::collections::HashMap::new();
        for (cell, column) in cells.iter().zip(columns) {
            let x: u64 = cell.parse().map_err(|_| {
                err(format!(
                    "field '{column}': '{}' is not a whole number",
                    short(cell)
                ))
            })?;
            v.insert(*column, x);
        }
        let field = |c: &str| v.get(c).copied().unwrap_or(0);
        let bad = |c: &str, m: String| err(format!("field '{c}': {m}"));
        let keep_ns = field("keep_us")
            .checked_mul(1000)
            .filter(|&k| k > 0)
            .ok_or_else(|| bad("keep_us", "a row is kept above 0 µs, below 2^64 ns".into()))?;
        if field("rate_bps") == 0 {
            return Err(bad(
                "rate_bps",
                "0 (no rate) is not supported: a schedule cannot lift a rate".into(),
            ));
        }
        for c in ["dup_delay_ns", "route_id"] {
            if field(c) != 0 {
                return Err(bad(c, format!("{} is not supported (only 0)", field(c))));
            }
        }
        let mut words = vec!["delay".to_string(), format!("{}ns", field("latency_ns"))];
        if columns.len() > 5 {
            match field("jitter_ns") {
                0 => words.extend(["0ns".into(), "distribution".into(), "uniform".into()]),
                j => words.extend([format!("{j}ns"), "distribution".into(), "normal".into()]),
            }
        }
        words.extend(["rate".into(), format!("{}bit", field("rate_bps"))]);
        words.extend([
            "loss".into(),
            scaled_percent(field("loss")).map_err(|e| bad("loss", e))?,
        ]);
        words.extend(["queue".into(), field("limit").to_string()]);
        if columns.len() > 5 {
            words.extend([
                "duplicate".into(),
                scaled_percent(field("dup_prob")).map_err(|e| bad("dup_prob", e))?,
            ]);
        }
        out.push(RawChange {
            at_ns,
            words,
            line: n,
        });
        if out.len() > MAX_CHANGES {
            return Err(err(format!("more than {MAX_CHANGES} changes")));
        }
        at_ns = at_ns
            .checked_add(keep_ns)
            .ok_or_else(|| bad("keep_us", "the rows last beyond 2^64 ns".into()))?;
    }
    if out.is_empty() {
        return Err(format!(
            "schedule '{name}': no rows (lines of KEEP_US,LATENCY_NS,...)"
        ));
    }
    Ok((out, looped.then_some(at_ns)))
}

/// One `[[schedule]]` table of a TOML config: the line of the line form it
/// stands for, or an error naming its row and field.
fn toml_row(table: &toml::Table, path: &str) -> Result<String, String> {
    let err = |m: String| format!("{path}: {m}");
    let text = |key: &str, v: &toml::Value| -> Result<String, String> {
        match v {
            toml::Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
            toml::Value::Integer(i) if *i >= 0 => Ok(i.to_string()),
            toml::Value::Float(x) if *x >= 0.0 => Ok(x.to_string()),
            _ => Err(err(format!(
                "field '{key}': expected a string such as \"10ms\" or a number, found {}",
                v.type_str()
            ))),
        }
    };
    let shapes: Vec<&String> = table
        .keys()
        .filter(|k| ["ramp", "square", "walk"].contains(&k.as_str()))
        .collect();
    if let Some(&shape) = shapes.first() {
        if table.len() > 1 {
            return Err(err(format!("a '{shape}' row has no other field")));
        }
        return Ok(format!("{shape} {}", text(shape, &table[shape])?));
    }
    let at = match table.get("at") {
        Some(v) => text("at", v)?,
        None => return Err(err("no field 'at' (or a shape: ramp, square, walk)".into())),
    };
    units::parse_time_ns(&at).map_err(|e| err(format!("field 'at': '{at}': {}", e.0)))?;
    let mut line = vec![at];
    for (key, value) in table.iter().filter(|(k, _)| k.as_str() != "at") {
        if key == "loop" {
            if table.len() != 2 || value.as_bool() != Some(true) {
                return Err(err("a loop row is 'at' and 'loop = true' alone".into()));
            }
            line.push("loop".into());
            continue;
        }
        let words = text(key, value)?;
        // The field alone, so that its error names it; conflicts between
        // fields are the line's, found when the schedule is resolved.
        let alone = format!("{key} {words}");
        let split: Vec<&str> = alone.split_whitespace().collect();
        super::check_words_alone(&split)
            .map_err(|e| err(format!("field '{key}': '{}': {}", e.word, e.message)))?;
        line.push(alone);
    }
    if line.len() == 1 {
        return Err(err("no link words beside 'at'".into()));
    }
    Ok(line.join(" "))
}

/// A TOML config's `[[schedule]]` array (`key` is where it sits, e.g.
/// `schedule` or `a-to-b.schedule`) as the text of the line form, one line
/// per row, so that its rows become changes exactly as those lines do (a
/// line's error then names the row by its number).
pub fn toml_rows(key: &str, rows: &[toml::Value]) -> Result<String, String> {
    let mut text = String::new();
    for (i, row) in rows.iter().enumerate() {
        let path = format!("[[{key}]] row {}", i + 1);
        let Some(table) = row.as_table() else {
            return Err(format!(
                "{path}: a row is a table, found {}",
                row.type_str()
            ));
        };
        text.push_str(&toml_row(table, &path)?);
        text.push('\n');
    }
    if rows.is_empty() {
        return Err(format!("[[{key}]]: no rows"));
    }
    Ok(text)
}

/// The changes of schedule text in the form its name says: CSV for a name
/// ending in `.csv`, else the line form.
pub(super) fn read_any(name: &str, text: &str) -> Result<(Vec<RawChange>, Option<u64>), String> {
    if name.to_ascii_lowercase().ends_with(".csv") {
        read_csv(name, text)
    } else {
        read_lines(name, text)
    }
}

/// A field quoted in an error, cut to 40 characters.
fn short(field: &str) -> String {
    field.chars().take(40).collect()
}

/// A value a shape moves: parsed to a number, printed back as a word.
#[derive(Clone, Copy)]
enum Quantity {
    Rate,
    Delay,
    Loss,
}

impl Quantity {
    fn of(word: &str) -> Result<Quantity, String> {
        match word {
            "rate" => Ok(Quantity::Rate),
            "delay" => Ok(Quantity::Delay),
            "loss" => Ok(Quantity::Loss),
            _ => Err(format!(
                "a shape moves 'rate', 'delay' or 'loss', not '{word}'"
            )),
        }
    }

    fn parse(self, text: &str) -> Result<f64, String> {
        let r = match self {
            Quantity::Rate => units::parse_rate_bps(text).map(|v| v as f64),
            Quantity::Delay => units::parse_time_ns(text).map(|v| v as f64),
            Quantity::Loss => units::parse_percent(text),
        };
        r.map_err(|e| format!("'{text}': {}", e.0))
    }

    fn words(self, v: f64) -> Vec<String> {
        match self {
            Quantity::Rate => vec!["rate".into(), format!("{}bit", v.round().max(1.0) as u64)],
            Quantity::Delay => vec!["delay".into(), format!("{}ns", v.round().max(0.0) as u64)],
            Quantity::Loss => vec![
                "loss".into(),
                format!("{:.6}%", (v * 100.0).clamp(0.0, 100.0)),
            ],
        }
    }
}

type Expanded = (u64, Vec<(u64, Vec<String>)>);

fn shape(kind: &str, args: &[&str]) -> Result<Expanded, String> {
    let usage = match kind {
        "ramp" => "ramp FROM TO STEP WORD A B",
        "square" => "square FROM TO PERIOD WORD A B",
        _ => "walk FROM TO STEP WORD START MIN MAX SIGMA seed N",
    };
    let want = if kind == "walk" { 10 } else { 6 };
    if args.len() != want {
        return Err(format!("'{usage}' takes {want} words after '{kind}'"));
    }
    let time = |w: &str| units::parse_time_ns(w).map_err(|e| format!("'{w}': {}", e.0));
    let (from, to, step) = (time(args[0])?, time(args[1])?, time(args[2])?);
    if to <= from || step == 0 {
        return Err(format!(
            "{usage}: TO must be after FROM and the step above 0"
        ));
    }
    if (to - from) / step > MAX_CHANGES as u64 {
        return Err(format!("{usage}: more than {MAX_CHANGES} steps"));
    }
    let q = Quantity::of(args[3])?;
    let mut out = Vec::new();
    match kind {
        "ramp" => {
            let (a, b) = (q.parse(args[4])?, q.parse(args[5])?);
            let mut t = from;
            while t <= to {
                let f = (t - from) as f64 / (to - from) as f64;
                out.push((t, q.words(a + (b - a) * f)));
                t += step;
            }
        }
        "square" => {
            let (a, b) = (q.parse(args[4])?, q.parse(args[5])?);
            let half = step / 2;
            if half == 0 {
                return Err(format!("{usage}: the period is at least 2 ns"));
            }
            let mut t = from;
            let mut high = false;
            while t < to {
                out.push((t, q.words(if high { b } else { a })));
                high = !high;
                t += if high { half } else { step - half };
            }
        }
        _ => {
            let start = q.parse(args[4])?;
            let (lo, hi, sigma) = (q.parse(args[5])?, q.parse(args[6])?, q.parse(args[7])?);
            if args[8] != "seed" {
                return Err(format!("'{usage}': expected 'seed N', not '{}'", args[8]));
            }
            let seed =
                units::parse_count(args[9]).map_err(|e| format!("'{}': {}", args[9], e.0))?;
            if !(lo <= start && start <= hi) {
                return Err(format!("{usage}: START must lie within [MIN, MAX]"));
            }
            let mut stream = Stream::new(seed, 0, StreamId::Schedule);
            let mut v = start;
            let mut t = from;
            while t <= to {
                out.push((t, q.words(v)));
                // Box-Muller from two uniforms of the walk's own stream.
                let (u1, u2) = (1.0 - stream.unit(), stream.unit());
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                v = (v + sigma * z).clamp(lo, hi);
                t += step;
            }
        }
    }
    Ok((from, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_expand_to_steps() {
        let text = "0s rate 10mbit\nramp 1s 3s 1s rate 1mbit 3mbit\nsquare 4s 8s 2s delay 10ms 50ms\n9s loop\n";
        let (lines, period) = read_lines("s", text).unwrap();
        let at: Vec<(u64, String)> = lines
            .iter()
            .map(|l| (l.at_ns / 1_000_000_000, l.words.join(" ")))
            .collect();
        assert_eq!(
            at,
            [
                (0, "rate 10mbit".into()),
                (1, "rate 1000000bit".into()),
                (2, "rate 2000000bit".into()),
                (3, "rate 3000000bit".into()),
                (4, "delay 10000000ns".into()),
                (5, "delay 50000000ns".into()),
                (6, "delay 10000000ns".into()),
                (7, "delay 50000000ns".into()),
            ]
        );
        assert_eq!(period, Some(9_000_000_000));
    }

    #[test]
    fn a_walk_is_seeded_and_bounded() {
        let text = "walk 0s 10s 100ms delay 20ms 5ms 50ms 5ms seed 7\n";
        let (a, _) = read_lines("w", text).unwrap();
        let (b, _) = read_lines("w", text).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 101);
        for l in &a {
            let ns: u64 = l.words[1].trim_end_matches("ns").parse().unwrap();
            assert!((5_000_000..=50_000_000).contains(&ns), "{ns}");
        }
        let moved = a.windows(2).filter(|w| w[0].words != w[1].words).count();
        // Steps clamped at a bound repeat it; most steps move.
        assert!(moved > 50, "the walk moved {moved} times in 100 steps");
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let e = |t: &str| read_lines("s.txt", t).unwrap_err();
        assert!(e("").contains("no changes"));
        assert!(e("5s rate 1mbit\n2s rate 2mbit\n")
            .starts_with("schedule 's.txt' line 2: 2s is before"));
        assert!(e("5 rate 1mbit\n").starts_with("schedule 's.txt' line 1: '5'"));
        assert!(e("1s\n").contains("no words after 1s"));
        assert!(e("1s rate 1mbit\n2s loop\n3s rate 1mbit\n").contains("line 3: nothing may follow"));
        assert!(e("ramp 1s 0s 1s rate 1mbit 2mbit\n").contains("TO must be after FROM"));
        assert!(e("ramp 0s 1s 1ms queue 1 2\n").contains("'rate', 'delay' or 'loss'"));
        assert!(e("1s schedule x\n").contains("not a schedule"));
    }
}

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
//! Times never go backwards from one line to the next (a shape counts by its
//! FROM and ends at its TO). The schedule starts where a trace does: at the
//! link's first packet, or at the change that gave the link its schedule.
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

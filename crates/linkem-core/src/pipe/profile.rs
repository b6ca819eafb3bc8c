//! Dummynet's `profile FILE`: the extra airtime of a MAC layer as an empirical
//! CDF (Dummynet Revisited §3.7, ipfw(8) "extra delay").
//!
//! # File
//! Lines of `keyword value`, `#` starts a comment, keywords in any case:
//! `name N` (shown by `--stats`), `bw`/`bandwidth R` (sets the pipe's rate),
//! `loss-level L` (0 ≤ L ≤ 1, default 1: no loss), `samples N` (2..1024,
//! default 100), then a header `prob delay` or `delay prob` and at least two
//! points. A delay without a unit is in milliseconds, as ipfw reads it (the seed
//! paper's example comments "delay in us"; write `100us` to mean microseconds);
//! a delay is at most one day, with a unit or without.
//!
//! # Table and draw (as ipfw builds them)
//! Points are sorted by (prob, delay). The table has N entries, entry i being
//! the inverse CDF at i/N: for each pair of neighbouring points (p1, d1),
//! (p2, d2), entries with p1·N ≤ i < p2·N get the delay on the line through
//! (p1·N, d1) and (p2·N, d2) at i. ipfw starts each segment at ⌊p1·N⌋, which
//! extrapolates the line below p1 (to negative delays in the seed's example);
//! we start at ⌈p1·N⌉. Entries below the first point keep 0 (ipfw's reading:
//! that mass has no extra airtime). Entries at or above the last point take the
//! last point's delay (ipfw leaves them 0, which would make the CDF fall back). For each packet an index i is drawn uniformly in 0..N; if
//! i ≥ ⌊L·N⌋ the packet is lost after its link time; otherwise entry i is added
//! to the time the packet keeps the link busy.

use crate::units;

/// Most samples a profile may ask for (ipfw's limit).
pub const MAX_SAMPLES: usize = 1024;

/// A parsed profile, ready to draw from.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// The file's `name` (empty without one), shown by `--stats`.
    pub name: String,
    /// The file's `bw`, bits per second: the pipe's rate (a pipe that sets
    /// `bw` as well is refused).
    pub rate_bps: Option<u64>,
    /// `loss-level` L, in [0, 1] (default 1: no loss): the share of packets
    /// not lost, rounded down to a multiple of 1/N; a packet is lost after its
    /// link time with probability 1 − ⌊L·N⌋/N for N samples.
    pub loss_level: f64,
    /// The N-entry table (N = `samples`): entry i is the extra airtime, ns,
    /// at the inverse CDF at i/N (see the module doc).
    pub table_ns: Vec<u64>,
    /// ⌊L·N⌋: draws at or above this index are lost.
    pub loss_index: usize,
}

/// A profile line that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: '{word}': {message}")]
pub struct ProfileError {
    /// Line in the profile file, 1-based (the last line when something is
    /// missing from the whole file).
    pub line: usize,
    /// The word at fault, as written (empty when something is missing).
    pub word: String,
    /// What is wrong with it.
    pub message: String,
}

fn perr(line: usize, word: &str, message: impl Into<String>) -> ProfileError {
    ProfileError {
        line,
        word: word.to_string(),
        message: message.into(),
    }
}

/// A delay: bare in milliseconds, or with a unit; at most
/// [`units::MAX_TIME_NS`] (one day) either way.
fn parse_delay_ns(text: &str) -> Result<u64, String> {
    if text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let ms: f64 = text
            .parse()
            .map_err(|_| format!("'{text}' is not a number"))?;
        let ns = (ms * 1e6).round();
        if !(ns.is_finite() && ns <= units::MAX_TIME_NS as f64) {
            return Err(format!(
                "'{text}': a delay is at most 1 day (86400000 ms, as with a unit)"
            ));
        }
        Ok(ns as u64)
    } else {
        units::parse_time_ns(text).map_err(|e| e.0)
    }
}

fn parse_prob(text: &str) -> Result<f64, String> {
    units::parse_probability(text).map_err(|e| e.0)
}

/// The `n` delays of the table, sample i at probability i/n, interpolated linearly
/// between the sorted `points` (probability, delay ns) and flat after the last.
fn delay_table(points: &[(f64, u64)], n: usize) -> Vec<u64> {
    let mut table_ns = vec![0u64; n];
    for w in points.windows(2) {
        let (y1, x1) = (w[0].0 * n as f64, w[0].1 as f64);
        let (y2, x2) = (w[1].0 * n as f64, w[1].1 as f64);
        let (start, stop) = (y1.ceil() as usize, (y2.ceil() as usize).min(n));
        for (i, slot) in table_ns.iter_mut().enumerate().take(stop).skip(start) {
            *slot = if x1 == x2 || y2 == y1 {
                x1 as u64
            } else {
                (x1 + (i as f64 - y1) * (x2 - x1) / (y2 - y1))
                    .max(0.0)
                    .round() as u64
            };
        }
    }
    let (p_last, d_last) = *points.last().expect("two points at least");
    for slot in table_ns
        .iter_mut()
        .skip((p_last * n as f64).ceil() as usize)
    {
        *slot = d_last;
    }
    table_ns
}

impl Profile {
    /// Parses a profile file's text.
    pub fn parse(text: &str) -> Result<Profile, ProfileError> {
        let mut name: Option<String> = None;
        let mut rate_bps: Option<u64> = None;
        let mut loss_level: Option<f64> = None;
        let mut samples: Option<usize> = None;
        let mut delay_first: Option<bool> = None;
        let mut points: Vec<(f64, u64)> = Vec::new();
        let mut last_line = 0;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            last_line = line;
            let body = raw.split('#').next().unwrap_or("");
            let words: Vec<&str> = body.split_whitespace().collect();
            if words.is_empty() {
                continue;
            }
            let first = words[0];
            let key = first.to_ascii_lowercase();
            if delay_first.is_none() && words.len() == 2 {
                let pair = (key.as_str(), words[1].to_ascii_lowercase());
                if pair == ("prob", "delay".into()) || pair == ("delay", "prob".into()) {
                    delay_first = Some(key == "delay");
                    continue;
                }
            }
            if words.len() != 2 {
                return Err(perr(
                    line,
                    words.get(2).unwrap_or(&first),
                    if words.len() == 1 {
                        "needs a value".to_string()
                    } else {
                        "one keyword and one value per line".to_string()
                    },
                ));
            }
            let arg = words[1];
            let dup = |what: bool| -> Result<(), ProfileError> {
                if what {
                    Err(perr(line, first, "given twice"))
                } else {
                    Ok(())
                }
            };
            match (delay_first, key.as_str()) {
                (None, "name") => {
                    dup(name.is_some())?;
                    name = Some(arg.to_string());
                }
                (None, "bw" | "bandwidth") => {
                    dup(rate_bps.is_some())?;
                    let r = if arg.bytes().all(|b| b.is_ascii_digit()) {
                        arg.parse::<u64>().ok().filter(|&r| r > 0)
                    } else {
                        units::parse_rate_bps(arg).ok()
                    };
                    rate_bps = Some(r.ok_or_else(|| {
                        perr(line, arg, "not a rate (write e.g. 2Mbit/s or 2mbit)")
                    })?);
                }
                (None, "loss-level") => {
                    dup(loss_level.is_some())?;
                    loss_level = Some(parse_prob(arg).map_err(|m| perr(line, arg, m))?);
                }
                (None, "samples") => {
                    dup(samples.is_some())?;
                    let n: usize = arg
                        .parse()
                        .map_err(|_| perr(line, arg, "samples is a whole number"))?;
                    if !(2..=MAX_SAMPLES).contains(&n) {
                        return Err(perr(line, arg, format!("samples is 2..{MAX_SAMPLES}")));
                    }
                    samples = Some(n);
                }
                (None, _) => return Err(perr(
                    line,
                    first,
                    "unknown profile keyword (name, bw, loss-level, samples, then 'prob delay')",
                )),
                (Some(df), _) => {
                    let (p, d) = if df { (arg, first) } else { (first, arg) };
                    let prob = parse_prob(p).map_err(|m| perr(line, p, m))?;
                    let delay = parse_delay_ns(d).map_err(|m| perr(line, d, m))?;
                    if points.len() >= MAX_SAMPLES {
                        return Err(perr(line, first, "too many points"));
                    }
                    points.push((prob, delay));
                }
            }
        }
        if delay_first.is_none() {
            return Err(perr(
                last_line,
                "",
                "no 'prob delay' (or 'delay prob') line",
            ));
        }
        if points.len() < 2 {
            return Err(perr(last_line, "", "a profile needs at least two points"));
        }
        let n = samples.unwrap_or(100);
        let loss_level = loss_level.unwrap_or(1.0);
        points.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let table_ns = delay_table(&points, n);
        Ok(Profile {
            name: name.unwrap_or_default(),
            rate_bps,
            loss_level,
            table_ns,
            loss_index: (loss_level * n as f64) as usize,
        })
    }

    /// The extra airtime for a uniform draw `r` (any u64), or `None` if lost.
    #[inline]
    pub fn draw(&self, r: u64) -> Option<u64> {
        let n = self.table_ns.len() as u64;
        let i = ((r as u128 * n as u128) >> 64) as usize;
        if i >= self.loss_index {
            None
        } else {
            Some(self.table_ns[i])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED_EXAMPLE: &str = "name profile_foo\nbandwidth 2Mbit/s\nloss-level 0.99\nsamples 5\n\
        prob delay # delay in us\n0.2 100\n0.4 130\n0.5 130\n0.8 1500\n0.98 2000\n";

    #[test]
    fn seed_example_builds_ipfw_table() {
        let p = Profile::parse(SEED_EXAMPLE).unwrap();
        assert_eq!(p.name, "profile_foo");
        assert_eq!(p.rate_bps, Some(2_000_000));
        assert_eq!(p.loss_index, 4);
        // samples 5: entry i is the inverse CDF at i/5: 0.0 → 0 (below the first
        // point), 0.2 → 100 ms, 0.4 → 130, 0.6 → 130 + 0.5/1.5·1370, 0.8 → 1500.
        let ms = 1_000_000;
        assert_eq!(p.table_ns[0], 0);
        assert_eq!(p.table_ns[1], 100 * ms);
        assert_eq!(p.table_ns[2], 130 * ms);
        assert_eq!(
            p.table_ns[3],
            (130.0e6 + 0.5 / 1.5 * 1370.0e6_f64).round() as u64
        );
        assert_eq!(p.table_ns[4], 1500 * ms);
        assert_eq!(p.draw(u64::MAX), None);
        assert_eq!(p.draw(0), Some(0));
    }

    #[test]
    fn units_and_delay_first() {
        let p = Profile::parse("delay prob\n100us 0\n300us 1\n").unwrap();
        assert_eq!(p.table_ns.len(), 100);
        assert_eq!(p.table_ns[0], 100_000);
        assert_eq!(p.table_ns[50], 200_000);
        assert_eq!(p.loss_index, 100);
    }

    #[test]
    fn errors_name_line_and_word() {
        let e = Profile::parse("name a\nfoo 3\n").unwrap_err();
        assert_eq!((e.line, e.word.as_str()), (2, "foo"));
        let e = Profile::parse("samples 5000\nprob delay\n0 1\n1 2\n").unwrap_err();
        assert_eq!((e.line, e.word.as_str()), (1, "5000"));
        let e = Profile::parse("prob delay\n0 1\n1.5 2\n").unwrap_err();
        assert_eq!((e.line, e.word.as_str()), (3, "1.5"));
        let e = Profile::parse("prob delay\n0 1\n").unwrap_err();
        assert!(e.message.contains("two points"));
        let e = Profile::parse("name a\nname b\nprob delay\n0 1\n1 1\n").unwrap_err();
        assert_eq!((e.line, e.word.as_str()), (2, "name"));
    }

    #[test]
    fn bare_delays_have_the_one_day_bound_of_delays_with_a_unit() {
        // 86400000 ms is one day, as 86400s is.
        let p = Profile::parse("prob delay\n0 86400000\n1 86400000\n").unwrap();
        assert!(p.table_ns.iter().all(|&d| d == units::MAX_TIME_NS));
        for (bare, unit) in [("86400001", "86401s"), ("999999999", "1000000s")] {
            let e = Profile::parse(&format!("prob delay\n0 0\n1 {bare}\n")).unwrap_err();
            assert_eq!((e.line, e.word.as_str()), (3, bare));
            assert!(e.message.contains("1 day"), "{e}");
            let e = Profile::parse(&format!("prob delay\n0 0\n1 {unit}\n")).unwrap_err();
            assert!(e.message.contains("1 day"), "{e}");
        }
    }
}

//! Delay distributions, sampled by inverse CDF (TLEM §IV-D; papers in docs/model.md).
//!
//! # Model
//! `delay D J distribution X` draws a uniform `u` in [0, 1) per packet (made
//! correlated with the previous one when a correlation is given, as netem does:
//! `u = (1 - ρ)·fresh + ρ·previous`) and maps it through the distribution's
//! inverse CDF:
//!
//! | distribution | delay | mean, spread |
//! |---|---|---|
//! | `uniform` (default) | `D - J + 2J·u` | mean D, between D - J and D + J (netem's meaning of J) |
//! | `normal` | `D + J·Φ⁻¹(u)` | mean D, standard deviation J |
//! | `pareto` | `D + J·(X - 1.5)/0.866`, `X = (1-u)^(-1/3)` (Pareto, shape 3) | mean D, standard deviation J, heavy right tail |
//! | `paretonormal` | `D + J·(0.25·N + 0.75·P)/√0.625` with independent normal and pareto parts | mean D, standard deviation J |
//! | `exponential` | `D + J·(-ln(1-u) - 1)` | mean D, standard deviation J, never below D - J |
//! | netem `.dist` file | `D + J·table[⌊u·n⌋]/8192` | as the table says (netem's format) |
//! | CDF profile file | `D + F⁻¹(u)` with F linear between the listed points | the listed delays; J is not used |
//!
//! A negative result becomes 0: a packet never leaves before it exits the link.
//! Correlation narrows the spread, exactly as in netem; the mean stays D.
//!
//! # Determinism
//! `ln`, `pow` and friends come from the `libm` crate (a port of musl's libm,
//! the same bits on every machine and toolchain), never from the platform's C
//! library, whose last bits differ between builds; `+ - * /` and `sqrt` are
//! exactly rounded by IEEE 754 and Rust never fuses them. The same holds in
//! [`crate::loss`]. `tests/golden.rs` pins the seeded output of every
//! distribution and loss model.

use crate::rng::Stream;
use crate::units::parse_time_ns;
use std::fmt;

/// netem's table scale: table values are in units of 1/8192 of the jitter.
pub const NETEM_DIST_SCALE: f64 = 8192.0;

/// Pareto shape used by the `pareto` and `paretonormal` distributions. 3 is the
/// smallest integer shape with a finite variance, so J keeps its meaning of a
/// standard deviation (netem's tables use the same shape).
const PARETO_SHAPE: f64 = 3.0;
const PARETO_MEAN: f64 = PARETO_SHAPE / (PARETO_SHAPE - 1.0);
/// sqrt(α / ((α-1)²(α-2))) for α = 3.
const PARETO_STD: f64 = 0.866_025_403_784_438_6;
/// sqrt(0.25² + 0.75²): the spread of paretonormal's mix, correctly rounded.
const SQRT_0_625: f64 = 0.790_569_415_042_094_9;
/// The largest uniform a stream draws ([`crate::rng::Stream::unit`]: 53 bits).
const U_MAX: f64 = 1.0 - 1.0 / (1u64 << 53) as f64;

/// The shape of the delay around its mean (see the module docs for each).
#[derive(Clone, PartialEq)]
pub enum Distribution {
    /// Between D - J and D + J.
    Uniform,
    /// Standard deviation J.
    Normal,
    /// Pareto of shape 3, standard deviation J.
    Pareto,
    /// netem's mix of normal and Pareto, standard deviation J.
    ParetoNormal,
    /// Shifted exponential, standard deviation J.
    Exponential,
    /// A netem `.dist` table: values in units of jitter / 8192, any order.
    Table {
        /// The file's name, as given.
        name: String,
        /// The table's values.
        values: Vec<f64>,
    },
    /// A cumulative profile: (probability, delay in ns) points, both non-decreasing,
    /// the last probability 1.
    Cdf {
        /// The file's name, as given.
        name: String,
        /// (probability, delay in ns) points.
        points: Vec<(f64, f64)>,
    },
}

impl fmt::Debug for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl Distribution {
    /// A distribution known by name (`normal`, ...), not a file.
    pub fn builtin(name: &str) -> Option<Self> {
        Some(match name {
            "uniform" => Distribution::Uniform,
            "normal" => Distribution::Normal,
            "pareto" => Distribution::Pareto,
            "paretonormal" => Distribution::ParetoNormal,
            "exponential" => Distribution::Exponential,
            _ => return None,
        })
    }

    /// Its name: the built-in name or the file's.
    pub fn name(&self) -> String {
        match self {
            Distribution::Uniform => "uniform".into(),
            Distribution::Normal => "normal".into(),
            Distribution::Pareto => "pareto".into(),
            Distribution::ParetoNormal => "paretonormal".into(),
            Distribution::Exponential => "exponential".into(),
            Distribution::Table { name, .. } | Distribution::Cdf { name, .. } => name.clone(),
        }
    }

    /// Whether the jitter scales the distribution (all but CDF profiles, which
    /// carry their own delays).
    pub fn uses_jitter(&self) -> bool {
        !matches!(self, Distribution::Cdf { .. })
    }

    /// Reads a distribution file. A file with a `prob delay` (or `delay prob`)
    /// header line is a CDF profile (Dummynet's format); otherwise it is a netem
    /// `.dist` table of integers. `name` is used in messages.
    pub fn parse_file(name: &str, text: &str) -> Result<Self, String> {
        let is_profile = text.lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w == ["prob", "delay"] || w == ["delay", "prob"]
        });
        if is_profile {
            parse_profile(name, text)
        } else {
            parse_netem_table(name, text)
        }
    }

    /// The largest delay beyond the mean this distribution can add, in ns,
    /// with jitter `jitter_ns`: the largest [`Distribution::standard`] sample
    /// over every uniform a stream draws (`u` in [0, 1 - 2^-53]) times the
    /// jitter, or a CDF profile's largest delay. Pareto's tail reaches
    /// about 240 000 × J at the largest draw; the others a few J (uniform 1,
    /// normal about 8.3, exponential about 35.7). What a bound on the
    /// largest delay a packet can get (claims' `delay` limit) needs.
    pub fn reach_ns(&self, jitter_ns: u64) -> u64 {
        let z = match self {
            Distribution::Cdf { points, .. } => {
                let d = points.iter().map(|p| p.1).fold(0.0, f64::max);
                return d.clamp(0.0, u64::MAX as f64) as u64;
            }
            Distribution::Table { values, .. } => values.iter().copied().fold(0.0, f64::max),
            Distribution::Uniform => 1.0,
            Distribution::Normal => inverse_normal_cdf(U_MAX),
            Distribution::Pareto => pareto_standard(U_MAX),
            // Both parts at their largest (the mix is not monotone in one u).
            Distribution::ParetoNormal => {
                (0.25 * inverse_normal_cdf(U_MAX) + 0.75 * pareto_standard(U_MAX)) / SQRT_0_625
            }
            Distribution::Exponential => -libm::log(1.0 - U_MAX) - 1.0,
        };
        let d = (z.max(0.0) * jitter_ns as f64).ceil();
        if d >= u64::MAX as f64 {
            u64::MAX
        } else {
            d as u64
        }
    }

    /// The standardised sample (mean 0, spread 1 in the units of J) for `u`.
    /// `stream` supplies the second, independent uniform of `paretonormal`.
    #[inline]
    pub fn standard(&self, u: f64, stream: &mut Stream) -> f64 {
        match self {
            Distribution::Uniform => 2.0 * u - 1.0,
            Distribution::Normal => inverse_normal_cdf(u),
            Distribution::Pareto => pareto_standard(u),
            Distribution::ParetoNormal => {
                let p = pareto_standard(stream.unit());
                (0.25 * inverse_normal_cdf(u) + 0.75 * p) / SQRT_0_625
            }
            Distribution::Exponential => -libm::log(1.0 - u) - 1.0,
            Distribution::Table { values, .. } => {
                let i = ((u * values.len() as f64) as usize).min(values.len() - 1);
                values[i]
            }
            Distribution::Cdf { points, .. } => cdf_inverse(points, u),
        }
    }
}

#[inline]
fn pareto_standard(u: f64) -> f64 {
    let x = libm::pow(1.0 - u, -1.0 / PARETO_SHAPE);
    (x - PARETO_MEAN) / PARETO_STD
}

/// The inverse of the standard normal CDF, after P. J. Acklam's rational
/// approximation (relative error below 1.2e-9), which needs no table and costs a
/// few multiplications in the central region where most draws land.
pub fn inverse_normal_cdf(u: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.02425;
    // u = 0 would be -infinity; the smallest u the stream can produce is 2^-53.
    let p = u.clamp(
        1.0 / 9_007_199_254_740_992.0,
        1.0 - 1.0 / 9_007_199_254_740_992.0,
    );
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < LOW {
        tail(libm::sqrt(-2.0 * libm::log(p)))
    } else if p > 1.0 - LOW {
        -tail(libm::sqrt(-2.0 * libm::log(1.0 - p)))
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

fn cdf_inverse(points: &[(f64, f64)], u: f64) -> f64 {
    // First point whose probability exceeds u; interpolate from the one before.
    let k = points.partition_point(|&(p, _)| p <= u);
    if k == 0 {
        return points[0].1;
    }
    if k >= points.len() {
        return points[points.len() - 1].1;
    }
    let (p0, d0) = points[k - 1];
    let (p1, d1) = points[k];
    if p1 <= p0 {
        return d1;
    }
    d0 + (d1 - d0) * (u - p0) / (p1 - p0)
}

/// A word from a file, as an error message may show it: a short word of the
/// characters numbers and units are written with is quoted, anything else only
/// described, so that a file that is not a table at all (`distribution
/// /etc/shadow`, whose lines are single words full of `:` and `$`) is never echoed.
fn shown(word: &str) -> String {
    const MAX_SHOWN_BYTES: usize = 16;
    let plain = |b: u8| b.is_ascii_alphanumeric() || b".+-%_,".contains(&b);
    if word.len() <= MAX_SHOWN_BYTES && word.bytes().all(plain) {
        format!("'{word}'")
    } else {
        format!("a {}-byte word", word.len())
    }
}

fn parse_netem_table(name: &str, text: &str) -> Result<Distribution, String> {
    let mut values = Vec::new();
    for (lineno, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        for token in line.split_whitespace() {
            let v: i32 = token.parse().map_err(|_| {
                format!(
                    "{name}:{}: {} is not an integer (a netem .dist table holds integers; \
                     a CDF profile needs a 'prob delay' header line)",
                    lineno + 1,
                    shown(token)
                )
            })?;
            if !(-32768..=32767).contains(&v) {
                return Err(format!(
                    "{name}:{}: {v} is outside a netem table's range -32768..32767",
                    lineno + 1
                ));
            }
            values.push(v as f64 / NETEM_DIST_SCALE);
        }
    }
    if values.is_empty() {
        return Err(format!("{name}: the distribution table is empty"));
    }
    Ok(Distribution::Table {
        name: name.to_string(),
        values,
    })
}

fn parse_profile(name: &str, text: &str) -> Result<Distribution, String> {
    let mut points: Vec<(f64, f64)> = Vec::new();
    let mut delay_first = false;
    let mut in_samples = false;
    for (lineno, raw) in text.lines().enumerate() {
        let at = || format!("{name}:{}", lineno + 1);
        let line = raw.split('#').next().unwrap_or("").trim();
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            [] => continue,
            ["prob", "delay"] => {
                in_samples = true;
                delay_first = false;
            }
            ["delay", "prob"] => {
                in_samples = true;
                delay_first = true;
            }
            ["name", ..] | ["samples", _] => {}
            ["loss-level", level] => {
                let l: f64 = level
                    .parse()
                    .map_err(|_| format!("{}: bad loss-level {}", at(), shown(level)))?;
                if l != 1.0 {
                    return Err(format!(
                        "{}: loss-level {level}: profile-driven loss is not supported; use 'loss P%' \
                         on the link instead",
                        at()
                    ));
                }
            }
            ["bw", ..] => {
                return Err(format!(
                    "{}: 'bw' in a profile is not supported; set the link's 'rate' instead",
                    at()
                ))
            }
            [a, b] if in_samples => {
                let (p, d) = if delay_first { (b, a) } else { (a, b) };
                let prob: f64 = p
                    .parse()
                    .map_err(|_| format!("{}: {} is not a probability", at(), shown(p)))?;
                if !(0.0..=1.0).contains(&prob) {
                    return Err(format!("{}: probability {p} is outside [0, 1]", at()));
                }
                // Dummynet profiles give delays in milliseconds; a unit may be written.
                let delay_ns = match d.parse::<f64>() {
                    Ok(ms) if ms >= 0.0 && ms.is_finite() => ms * 1e6,
                    Ok(_) => return Err(format!("{}: delay {d} must be non-negative", at())),
                    Err(_) => parse_time_ns(d).map_err(|e| format!("{}: {e}", at()))? as f64,
                };
                if let Some(&(lp, ld)) = points.last() {
                    if prob < lp {
                        return Err(format!(
                            "{}: probability {p} is below the previous {lp}; a CDF never decreases",
                            at()
                        ));
                    }
                    if delay_ns < ld {
                        return Err(format!("{}: delay {d} is below the previous one; list delays in increasing order", at()));
                    }
                }
                points.push((prob, delay_ns));
            }
            _ => {
                let first = w.first().copied().unwrap_or("");
                return Err(format!(
                    "{}: cannot read the line starting with {} (expected 'prob delay' pairs)",
                    at(),
                    shown(first)
                ));
            }
        }
    }
    match points.last() {
        None => Err(format!("{name}: the profile lists no 'prob delay' points")),
        Some(&(p, _)) if p != 1.0 => Err(format!(
            "{name}: the last probability is {p}; a CDF profile must end at probability 1"
        )),
        Some(_) => Ok(Distribution::Cdf {
            name: name.to_string(),
            points,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_a_table_is_never_echoed() {
        for text in [
            "root:$6$s3cr3tHash:19000:0:99999:7:::\n",
            "prob delay\nroot:$6$s3cr3tHash:19000 x\n",
            "prob delay\nroot:s3cr3t 5\n",
        ] {
            let e = Distribution::parse_file("t", text).unwrap_err();
            assert!(!e.contains("s3cr3t"), "{e}");
            assert!(e.starts_with("t:"), "names the file and line: {e}");
        }
        let e = Distribution::parse_file("t", "1 2 x3\n").unwrap_err();
        assert!(e.contains("'x3'"), "a short word is quoted: {e}");
    }

    #[test]
    fn constants_are_the_correctly_rounded_values() {
        // sqrt is exact-rounded in IEEE 754, so std's value is the reference.
        assert_eq!(SQRT_0_625, 0.625f64.sqrt());
        assert_eq!(PARETO_STD, 0.75f64.sqrt());
    }
    use crate::rng::StreamId;

    #[test]
    fn inverse_normal_matches_known_quantiles() {
        for (u, z) in [
            (0.5, 0.0),
            (0.975, 1.959_963_985),
            (0.841_344_746, 1.0),
            (0.001, -3.090_232_306),
            (0.999_999, 4.753_424_309),
        ] {
            assert!((inverse_normal_cdf(u) - z).abs() < 1e-6, "u={u}");
            assert!((inverse_normal_cdf(1.0 - u) + z).abs() < 1e-6, "u={u}");
        }
        assert!(inverse_normal_cdf(0.0).is_finite());
    }

    #[test]
    fn pareto_is_standardised() {
        // Median of Pareto(3, 1) is 2^(1/3).
        let z = pareto_standard(0.5);
        assert!((z - (2f64.powf(1.0 / 3.0) - 1.5) / PARETO_STD).abs() < 1e-12);
        assert!(pareto_standard(0.0) > -0.58 && pareto_standard(0.0) < -0.57);
    }

    #[test]
    fn the_reach_bounds_every_draw() {
        let table = Distribution::parse_file("t.dist", "-8192 0\n8192 16384\n").unwrap();
        let jitter_ns = 1_000_000;
        for d in [
            Distribution::Uniform,
            Distribution::Normal,
            Distribution::Pareto,
            Distribution::ParetoNormal,
            Distribution::Exponential,
            table.clone(),
        ] {
            let reach = d.reach_ns(jitter_ns) as f64;
            let mut s = Stream::new(7, 0, StreamId::Delay);
            for u in [0.0, 0.5, 0.999_999, U_MAX] {
                let z = d.standard(u, &mut s);
                assert!(
                    z * jitter_ns as f64 <= reach,
                    "{d:?} at u={u}: {z} J beyond {reach}"
                );
            }
        }
        assert_eq!(Distribution::Uniform.reach_ns(jitter_ns), jitter_ns);
        assert_eq!(table.reach_ns(jitter_ns), 2 * jitter_ns);
        assert!(Distribution::Pareto.reach_ns(jitter_ns) > 200_000 * jitter_ns);
        let n = Distribution::Normal.reach_ns(jitter_ns);
        assert!((8 * jitter_ns..9 * jitter_ns).contains(&n), "{n}");
        let cdf = Distribution::parse_file("p", "prob delay\n0 1\n1 5\n").unwrap();
        assert_eq!(cdf.reach_ns(0), 5_000_000);
    }

    #[test]
    fn netem_table_file() {
        let d = Distribution::parse_file("t.dist", "# comment\n-8192 0\n 8192 16384\n").unwrap();
        let mut s = Stream::new(1, 0, StreamId::Delay);
        assert_eq!(d.standard(0.0, &mut s), -1.0);
        assert_eq!(d.standard(0.3, &mut s), 0.0);
        assert_eq!(d.standard(0.99, &mut s), 2.0);
        let e = Distribution::parse_file("bad.dist", "1 2\n3 x\n").unwrap_err();
        assert!(e.contains("bad.dist:2") && e.contains("'x'"), "{e}");
        assert!(Distribution::parse_file("e.dist", "# nothing\n").is_err());
        assert!(Distribution::parse_file("r.dist", "40000\n")
            .unwrap_err()
            .contains("range"));
    }

    #[test]
    fn cdf_profile_interpolates_linearly() {
        let text = "name wifi\nsamples 100\nloss-level 1.0\nprob delay\n0.0 10\n0.5 20\n1.0 40\n";
        let d = Distribution::parse_file("p.txt", text).unwrap();
        let mut s = Stream::new(1, 0, StreamId::Delay);
        assert_eq!(d.standard(0.0, &mut s), 10e6);
        assert_eq!(d.standard(0.25, &mut s), 15e6);
        assert_eq!(d.standard(0.75, &mut s), 30e6);
        assert!(!d.uses_jitter());
    }

    #[test]
    fn cdf_profile_errors_name_the_line() {
        let e = Distribution::parse_file("p", "prob delay\n0.5 10\n0.2 20\n").unwrap_err();
        assert!(e.contains("p:3"), "{e}");
        let e = Distribution::parse_file("p", "prob delay\n0 10\n0.5 20\n").unwrap_err();
        assert!(e.contains("probability 1"), "{e}");
        let e = Distribution::parse_file("p", "loss-level 0.9\nprob delay\n1 1\n").unwrap_err();
        assert!(e.contains("loss-level"), "{e}");
        let e = Distribution::parse_file("p", "delay prob\n10 0\n5 1\n").unwrap_err();
        assert!(e.contains("increasing"), "{e}");
    }
}

//! Parsing of the quantities users type: times, rates, sizes, percentages.
//!
//! Users arrive with habits from two tools that disagree on some spellings:
//! tc (netem, tbf) and ipfw (Dummynet). A spelling that both read the same way
//! is accepted; one that they read differently is refused with a message naming
//! both readings, because silently picking one would make a link eight times (or
//! 2.4 % ) off from what the user believes they configured.
//!
//! Every quantity must be finite and within a stated bound, so that no later
//! product (rate × delay, a buffer size, a schedule) can overflow or run for
//! ever: times at most [`MAX_TIME_NS`] (one day: longer than any link delay,
//! interval or measurement linkem is meant for), rates at most [`MAX_RATE_BPS`]
//! (10 Tbit/s, above any single interface), sizes at most [`MAX_SIZE_BYTES`]
//! (1 TiB, above any buffer this machine class can hold).

use std::fmt;

/// Why a quantity could not be read. The message is shown to the user as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitError(pub String);

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The longest time any word or option takes: one day.
pub const MAX_TIME_NS: u64 = 86_400 * 1_000_000_000;
/// The fastest rate any word or option takes: 10 Tbit/s.
pub const MAX_RATE_BPS: u64 = 10_000_000_000_000;
/// The largest size any word or option takes: 1 TiB.
pub const MAX_SIZE_BYTES: u64 = 1 << 40;

impl std::error::Error for UnitError {}

fn err<T>(msg: impl Into<String>) -> Result<T, UnitError> {
    Err(UnitError(msg.into()))
}

/// Splits "10.5ms" into (10.5, "ms"). The number must be finite and non-negative.
fn split_number(text: &str) -> Result<(f64, &str), UnitError> {
    let end = text
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.'))
        .map(|(i, _)| i)
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(end);
    if num.is_empty() {
        return err(format!("'{text}': expected a number"));
    }
    let value: f64 = num
        .parse()
        .map_err(|_| UnitError(format!("'{text}': '{num}' is not a number")))?;
    if !value.is_finite() {
        return err(format!("'{text}': the number is not finite"));
    }
    Ok((value, unit))
}

/// Rounds a non-negative float to u64, refusing anything above `max` (shown as `max_text`).
fn to_u64(value: f64, max: u64, max_text: &str, text: &str) -> Result<u64, UnitError> {
    let rounded = value.round();
    if !rounded.is_finite() || rounded > max as f64 {
        return err(format!(
            "'{text}': more than the largest accepted, {max_text}"
        ));
    }
    Ok(rounded as u64)
}

/// The time units every word and option reads, with their length in ns.
/// One table, so that `delay 10ms`, `--stats-interval 1s`, `--claim-ttl 1h`
/// and `watch 2s` all read the same spellings. `m` alone is not a unit:
/// tc has none, and a reader could take it for minutes or for milli.
const TIME_UNITS: &[(&[&str], f64)] = &[
    (&["h", "hr", "hour", "hours"], 3600e9),
    (&["min", "mins"], 60e9),
    (&["s", "sec", "secs"], 1e9),
    (&["ms", "msec", "msecs"], 1e6),
    (&["us", "usec", "usecs", "µs"], 1e3),
    (&["ns", "nsec", "nsecs"], 1.0),
];

fn time_scale(unit: &str) -> Option<f64> {
    TIME_UNITS
        .iter()
        .find(|(names, _)| names.contains(&unit))
        .map(|&(_, scale)| scale)
}

/// A time with a unit (`10ms`, `1.5s`, `250us`, `100ns`, `2min`, `1h`), in
/// nanoseconds. A bare `0` is zero in every unit and so accepted.
///
/// Any other bare number is refused: tc reads it as microseconds, ipfw's
/// `delay` as milliseconds. Options that took a bare number before units
/// existed read it through [`parse_time_or_bare_ns`].
pub fn parse_time_ns(text: &str) -> Result<u64, UnitError> {
    let (value, unit) = split_number(text)?;
    if unit.is_empty() && value == 0.0 {
        return Ok(0);
    }
    let scale = match (unit, time_scale(unit)) {
        (_, Some(scale)) => scale,
        ("", None) => {
            return err(format!(
                "'{text}': a time needs a unit (ns, us, ms, s, min, h); tc reads a bare number \
                 as microseconds and ipfw as milliseconds"
            ))
        }
        ("m", None) => {
            return err(format!(
            "'{text}': 'm' is not a time unit: write {v}min for minutes or {v}ms for milliseconds",
            v = fmt_num(value)
        ))
        }
        (_, None) => {
            return err(format!(
                "'{text}': unknown time unit '{unit}' (use ns, us, ms, s, min or h)"
            ))
        }
    };
    to_u64(value * scale, MAX_TIME_NS, "1 day (86400s)", text)
}

/// A time as [`parse_time_ns`] reads it, or a bare number in `bare_unit`
/// (one of the units of [`TIME_UNITS`]): for options that took a plain number
/// of seconds (or ms) before they took units, so that old command lines keep
/// their meaning.
pub fn parse_time_or_bare_ns(text: &str, bare_unit: &str) -> Result<u64, UnitError> {
    let (value, unit) = split_number(text)?;
    if unit.is_empty() {
        let scale = time_scale(bare_unit)
            .ok_or_else(|| UnitError(format!("'{bare_unit}' is not a time unit")))?;
        return to_u64(value * scale, MAX_TIME_NS, "1 day (86400s)", text);
    }
    parse_time_ns(text)
}

/// A bit rate with a unit, in bits per second.
///
/// Accepted: tc's `bit kbit mbit gbit tbit` (powers of 1000), `kibit mibit gibit`
/// (powers of 1024), ipfw's `bit/s Kbit/s Mbit/s Gbit/s` and `Byte/s KByte/s MByte/s`.
/// Refused: `bps kbps mbps gbps` (tc reads bytes per second, ipfw bits per second)
/// and a bare `K`/`M`/`G` suffix (ipfw reads bits, tc has no such unit).
pub fn parse_rate_bps(text: &str) -> Result<u64, UnitError> {
    let (value, unit) = split_number(text)?;
    let lower = unit.to_ascii_lowercase();
    let bits_scale = match lower.as_str() {
        "bit" | "bit/s" => Some(1.0),
        "kbit" | "kbit/s" => Some(1e3),
        "mbit" | "mbit/s" => Some(1e6),
        "gbit" | "gbit/s" => Some(1e9),
        "tbit" | "tbit/s" => Some(1e12),
        "kibit" => Some(1024.0),
        "mibit" => Some(1024.0 * 1024.0),
        "gibit" => Some(1024.0 * 1024.0 * 1024.0),
        _ => None,
    };
    let byte_scale = match lower.as_str() {
        "byte/s" | "bytes/s" => Some(8.0),
        "kbyte/s" | "kbytes/s" => Some(8e3),
        "mbyte/s" | "mbytes/s" => Some(8e6),
        "gbyte/s" | "gbytes/s" => Some(8e9),
        _ => None,
    };
    let scale = match (bits_scale, byte_scale) {
        (Some(s), _) | (_, Some(s)) => s,
        _ => {
            return match lower.as_str() {
                "" => err(format!(
                    "'{text}': a rate needs a unit, e.g. {v}mbit or {v}Mbit/s",
                    v = fmt_num(value)
                )),
                "bps" | "kbps" | "mbps" | "gbps" | "tbps" => {
                    let prefix = &unit[..unit.len() - 3];
                    err(format!(
                        "'{text}' is ambiguous: tc reads '{unit}' as {prefix}bytes per second, \
                         ipfw as {prefix}bits per second; write {v}{p}bit (bits) or {v}{p}Byte/s (bytes)",
                        v = fmt_num(value),
                        p = prefix.to_ascii_uppercase()
                    ))
                }
                "k" | "m" | "g" => err(format!(
                    "'{text}' is ambiguous: ipfw reads '{unit}' as {u}bit/s, tc does not accept it; \
                     write {v}{l}bit",
                    u = unit.to_ascii_uppercase(),
                    l = lower,
                    v = fmt_num(value)
                )),
                _ => err(format!(
                    "'{text}': unknown rate unit '{unit}' (use bit, kbit, mbit, gbit, Mbit/s, MByte/s, ...)"
                )),
            }
        }
    };
    let bps = to_u64(value * scale, MAX_RATE_BPS, "10tbit", text)?;
    if bps == 0 {
        return err(format!("'{text}': a rate must be above zero"));
    }
    Ok(bps)
}

fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{}", v as u64)
    } else {
        format!("{v}")
    }
}

/// A size in bytes with a unit: `1500B`, `100kB` (1000), `64KiB` (1024), `2MB`,
/// `1MiB`, `1GB`, `1GiB`, ipfw's `64KBytes` (1024, as ipfw reads it).
///
/// Refused: `k kb KB m mb MB`-style spellings that tc reads as powers of 1024 and
/// SI as powers of 1000, except the exact SI spellings `kB`, `MB`, `GB`.
pub fn parse_size_bytes(text: &str) -> Result<u64, UnitError> {
    let (value, unit) = split_number(text)?;
    let scale = match unit {
        "B" | "b" | "byte" | "bytes" => 1.0,
        "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "KBytes" | "Kbytes" | "KByte" | "Kbyte" => 1024.0,
        "MBytes" | "Mbytes" | "MByte" | "Mbyte" => 1024.0 * 1024.0,
        "" => {
            return err(format!(
            "'{text}': a size needs a unit (B, kB, KiB, MB, MiB); a bare number is a packet count \
                 only where a packet count is meant"
        ))
        }
        "k" | "K" | "kb" | "Kb" | "KB" | "m" | "M" | "mb" | "Mb" | "g" | "G" | "gb" | "Gb" => {
            return err(format!(
                "'{text}' is ambiguous: tc reads '{unit}' as powers of 1024 bytes, SI as powers of \
                 1000 (and 'b' can mean bits); write KiB/MiB (1024) or kB/MB (1000)"
            ))
        }
        _ => {
            return err(format!(
                "'{text}': unknown size unit '{unit}' (use B, kB, KiB, MB, MiB, GB, GiB)"
            ))
        }
    };
    to_u64(value * scale, MAX_SIZE_BYTES, "1TiB", text)
}

/// A percentage written with its sign (`1%`, `0.5%`), as a probability in [0, 1].
///
/// A bare number is refused: netem reads `1` as 1 %, Dummynet's `plr` as probability 1.
pub fn parse_percent(text: &str) -> Result<f64, UnitError> {
    let Some(num) = text.strip_suffix('%') else {
        return err(format!(
            "'{text}': write a percentage with its sign ('{text}%'); netem reads a bare number as \
             percent, Dummynet's plr as a probability"
        ));
    };
    let (value, rest) = split_number(num)?;
    if !rest.is_empty() {
        return err(format!("'{text}': not a percentage"));
    }
    if value > 100.0 {
        return err(format!("'{text}': a percentage is at most 100%"));
    }
    Ok(value / 100.0)
}

/// A probability in [0, 1] written as a plain number (Dummynet's `plr 0.01`) or
/// as a percentage.
pub fn parse_probability(text: &str) -> Result<f64, UnitError> {
    if text.ends_with('%') {
        return parse_percent(text);
    }
    let (value, rest) = split_number(text)?;
    if !rest.is_empty() {
        return err(format!("'{text}': not a probability"));
    }
    if value > 1.0 {
        return err(format!(
            "'{text}': a probability is at most 1 (write {text}% for percent)"
        ));
    }
    Ok(value)
}

/// A time's text, checked by [`parse_time_ns`] and kept: the check of a
/// command-line option that is read later, so that a wrong time is refused
/// under the option's name before anything starts.
pub fn checked_time(text: &str) -> Result<String, UnitError> {
    parse_time_ns(text).map(|_| text.to_string())
}

/// As [`checked_time`], or the word `off`.
pub fn checked_time_or_off(text: &str) -> Result<String, UnitError> {
    if text == "off" {
        return Ok(text.to_string());
    }
    checked_time(text).map_err(|e| UnitError(format!("{e}, or 'off'")))
}

/// A time in seconds, for options named in seconds before they took units
/// (`--stats-interval`, `--duration`): any time [`parse_time_ns`] reads
/// (`500ms`, `1.5s`, `2min`, `1h`), or a bare number of seconds (`0.5`, `30`);
/// above zero and at most a day, like every time.
pub fn parse_seconds(text: &str) -> Result<f64, UnitError> {
    let ns = parse_time_or_bare_ns(text, "s")?;
    if ns == 0 {
        return err(format!(
            "'{text}': give a time above 0 (a bare number is seconds)"
        ));
    }
    Ok(ns as f64 / 1e9)
}

/// A plain non-negative integer (a packet count, a seed).
pub fn parse_count(text: &str) -> Result<u64, UnitError> {
    text.parse::<u64>()
        .map_err(|_| UnitError(format!("'{text}': expected a whole number")))
}

/// Formats nanoseconds for people: `10ms`, `1.5s`, `250us`, `7ns`.
pub fn format_time_ns(ns: u64) -> String {
    for (scale, unit) in [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")] {
        if ns >= scale {
            return if ns.is_multiple_of(scale) {
                format!("{}{unit}", ns / scale)
            } else {
                format!("{}{unit}", ns as f64 / scale as f64)
            };
        }
    }
    format!("{ns}ns")
}

/// Formats a rate in tc's unambiguous spelling: `100mbit`, `1.5gbit`, `64kbit`.
pub fn format_rate_bps(bps: u64) -> String {
    for (scale, unit) in [
        (1_000_000_000_000, "tbit"),
        (1_000_000_000, "gbit"),
        (1_000_000, "mbit"),
        (1_000, "kbit"),
    ] {
        if bps >= scale {
            return if bps.is_multiple_of(scale) {
                format!("{}{unit}", bps / scale)
            } else {
                format!("{}{unit}", bps as f64 / scale as f64)
            };
        }
    }
    format!("{bps}bit")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_need_units_and_scale_exactly() {
        assert_eq!(parse_time_ns("10ms"), Ok(10_000_000));
        assert_eq!(parse_time_ns("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_time_ns("250us"), Ok(250_000));
        assert_eq!(parse_time_ns("7ns"), Ok(7));
        assert_eq!(parse_time_ns("32msec"), Ok(32_000_000));
        let e = parse_time_ns("10").unwrap_err().0;
        assert!(
            e.contains("microseconds") && e.contains("milliseconds"),
            "{e}"
        );
        assert!(parse_time_ns("10m").unwrap_err().0.contains("10min"));
        assert!(parse_time_ns("ms").is_err());
        assert!(parse_time_ns("10x").unwrap_err().0.contains("min or h"));
        assert!(parse_time_ns("-1ms").is_err());
    }

    #[test]
    fn one_time_syntax_with_minutes_hours_and_a_bare_zero() {
        assert_eq!(parse_time_ns("2min"), Ok(120_000_000_000));
        assert_eq!(parse_time_ns("1.5min"), Ok(90_000_000_000));
        assert_eq!(parse_time_ns("1h"), Ok(3_600_000_000_000));
        assert_eq!(parse_time_ns("0.5h"), Ok(1_800_000_000_000));
        assert_eq!(parse_time_ns("24h"), Ok(MAX_TIME_NS));
        assert!(parse_time_ns("24.1h").is_err());
        assert_eq!(parse_time_ns("0"), Ok(0));
        assert_eq!(parse_time_ns("0.0"), Ok(0));
        assert!(parse_time_ns("1").is_err());
        // Options once in plain seconds keep their meaning and take every unit.
        assert_eq!(parse_seconds("1s"), Ok(1.0));
        assert_eq!(parse_seconds("1.5s"), Ok(1.5));
        assert_eq!(parse_seconds("30"), Ok(30.0));
        assert_eq!(parse_seconds("250ms"), Ok(0.25));
        assert_eq!(parse_seconds("2min"), Ok(120.0));
        assert_eq!(parse_seconds("1h"), Ok(3600.0));
        assert_eq!(parse_time_or_bare_ns("500", "ms"), Ok(500_000_000));
        assert_eq!(parse_time_or_bare_ns("1s", "ms"), Ok(1_000_000_000));
        assert!(parse_time_or_bare_ns("1m", "ms").is_err());
    }

    #[test]
    fn rates_in_tc_and_ipfw_spellings() {
        assert_eq!(parse_rate_bps("10mbit"), Ok(10_000_000));
        assert_eq!(parse_rate_bps("3Mbit/s"), Ok(3_000_000));
        assert_eq!(parse_rate_bps("100kbit"), Ok(100_000));
        assert_eq!(parse_rate_bps("1gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate_bps("1mibit"), Ok(1_048_576));
        assert_eq!(parse_rate_bps("2KByte/s"), Ok(16_000));
        assert_eq!(parse_rate_bps("1.5Gbit/s"), Ok(1_500_000_000));
    }

    #[test]
    fn rate_units_read_differently_by_tc_and_ipfw_are_refused_naming_both() {
        let e = parse_rate_bps("10mbps").unwrap_err().0;
        assert!(e.contains("tc reads") && e.contains("ipfw"), "{e}");
        assert!(
            e.contains("bytes per second") && e.contains("bits per second"),
            "{e}"
        );
        let e = parse_rate_bps("10M").unwrap_err().0;
        assert!(e.contains("ipfw") && e.contains("tc"), "{e}");
        assert!(parse_rate_bps("10").unwrap_err().0.contains("needs a unit"));
        assert!(parse_rate_bps("0mbit").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size_bytes("1500B"), Ok(1500));
        assert_eq!(parse_size_bytes("64KiB"), Ok(65536));
        assert_eq!(parse_size_bytes("100kB"), Ok(100_000));
        assert_eq!(parse_size_bytes("1MiB"), Ok(1_048_576));
        assert!(parse_size_bytes("64KB").unwrap_err().0.contains("1024"));
        assert!(parse_size_bytes("64k").is_err());
        assert!(parse_size_bytes("64").is_err());
    }

    #[test]
    fn percentages_and_probabilities() {
        assert_eq!(parse_percent("1%"), Ok(0.01));
        assert_eq!(parse_percent("100%"), Ok(1.0));
        assert!(parse_percent("1").unwrap_err().0.contains("netem"));
        assert!(parse_percent("101%").is_err());
        assert_eq!(parse_probability("0.01"), Ok(0.01));
        assert_eq!(parse_probability("5%"), Ok(0.05));
        assert!(parse_probability("2").is_err());
    }

    #[test]
    fn non_finite_and_absurd_values_are_refused_naming_the_bound() {
        let huge = "9".repeat(400);
        for t in [
            format!("{huge}ms"),
            "86401s".into(),
            "100000000000000000000ns".into(),
        ] {
            let e = parse_time_ns(&t).unwrap_err().0;
            assert!(e.contains("1 day") || e.contains("not finite"), "{t}: {e}");
        }
        assert_eq!(parse_time_ns("86400s"), Ok(MAX_TIME_NS));
        for r in [
            format!("{huge}bit"),
            "10.1tbit".into(),
            "2000GByte/s".into(),
        ] {
            assert!(parse_rate_bps(&r).is_err(), "{r}");
        }
        assert!(parse_rate_bps("1.25GByte/s").is_ok());
        assert_eq!(parse_rate_bps("10tbit"), Ok(MAX_RATE_BPS));
        for z in [format!("{huge}B"), "1025GiB".into(), "2000GB".into()] {
            let e = parse_size_bytes(&z).unwrap_err().0;
            assert!(e.contains("1TiB") || e.contains("not finite"), "{z}: {e}");
        }
        assert_eq!(parse_size_bytes("1024GiB"), Ok(MAX_SIZE_BYTES));
        for p in [
            format!("{huge}%"),
            "inf%".into(),
            "NaN%".into(),
            "1e3%".into(),
        ] {
            assert!(parse_percent(&p).is_err(), "{p}");
        }
        assert_eq!(parse_seconds("0.5"), Ok(0.5));
        for x in [
            "0", "0s", "inf", "NaN", "86401", "1e9", "25h", "1441min", "",
        ] {
            assert!(parse_seconds(x).is_err(), "{x}");
        }
        for x in ["inf", "nan", "1e400", "-0.5", "1e-3"] {
            assert!(parse_probability(x).is_err(), "{x}");
            assert!(parse_time_ns(&format!("{x}ms")).is_err(), "{x}ms");
        }
    }

    #[test]
    fn formatting_round_trips() {
        for t in ["10ms", "1s", "1.5s", "250us", "7ns"] {
            assert_eq!(format_time_ns(parse_time_ns(t).unwrap()), t);
        }
        for r in ["10mbit", "1gbit", "100kbit", "1.5gbit", "999bit"] {
            assert_eq!(format_rate_bps(parse_rate_bps(r).unwrap()), r);
        }
    }
}

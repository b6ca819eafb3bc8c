//! Quantities as ipfw/dnctl read them after `pipe N config` (ipfw(8),
//! `read_bandwidth` and the `queue` option of ipfw's dummynet.c).
//!
//! - `delay 20`: milliseconds (ipfw takes whole milliseconds; linkem also takes
//!   fractions and every linkem time unit).
//! - `bw N[K|M|G][unit]`: K, M, G are powers of 1000; the value is in bytes per
//!   second when the unit starts with `B` (but not `Bit`) or `by`, else bits per
//!   second (`3M`, `3Mbit/s`, `3Mbps` are 3 Mbit/s; `1MByte/s`, `1MBps` 8 Mbit/s);
//!   a bare number is bit/s and `bw 0` means no limit.
//! - `queue N`: slots (packets); `queue NK` / `NKBytes` / `NKB` kibibytes;
//!   `queue NB` / `Nbytes` bytes.
//!
//! Spellings ipfw would not read (`10kibit`, `64MiB`) fall back to linkem's.
//! The bounds are linkem's own ([`units::MAX_TIME_NS`], [`units::MAX_RATE_BPS`],
//! [`units::MAX_SIZE_BYTES`]) whatever the spelling, so that what a pipe prints
//! (in linkem's words) always reads back.

use crate::units::{self, UnitError};

/// A queue limit as Dummynet reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum QueueLimit {
    Slots(u64),
    Bytes(u64),
}

/// Splits a leading decimal number (digits and dots) from the rest.
fn split_number(text: &str) -> Option<(f64, &str)> {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let value: f64 = text[..end].parse().ok()?;
    value.is_finite().then_some((value, &text[end..]))
}

/// A time: a bare number is milliseconds.
pub(super) fn time_ns(text: &str) -> Result<u64, UnitError> {
    match split_number(text) {
        Some((ms, "")) => {
            let ns = (ms * 1e6).round();
            if ns > units::MAX_TIME_NS as f64 {
                return Err(UnitError(format!(
                    "'{text}': more than the largest accepted, 1 day"
                )));
            }
            Ok(ns as u64)
        }
        _ => units::parse_time_ns(text),
    }
}

/// A bandwidth in bit/s; `None` for `bw 0` (no limit).
pub(super) fn bw_bps(text: &str) -> Result<Option<u64>, UnitError> {
    if text.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(UnitError(format!(
            "'{text}': ipfw's 'bw IFNAME' (the rate of an interface) is not supported; give a rate"
        )));
    }
    let Some((value, rest)) = split_number(text) else {
        return units::parse_rate_bps(text).map(Some);
    };
    let (scale, unit) = match rest.as_bytes().first() {
        Some(b'K' | b'k') => (1e3, &rest[1..]),
        Some(b'M' | b'm') => (1e6, &rest[1..]),
        Some(b'G' | b'g') => (1e9, &rest[1..]),
        _ => (1.0, rest),
    };
    let per_byte = match unit {
        "" | "bit" | "bits" | "bit/s" | "bits/s" | "Bit/s" | "Bits/s" | "b/s" | "bps" => 1.0,
        "B" | "B/s" | "Bps" | "Byte/s" | "Bytes/s" | "byte/s" | "bytes/s" | "bytes" => 8.0,
        _ => return units::parse_rate_bps(text).map(Some),
    };
    let bps = (value * scale * per_byte).round();
    if bps > units::MAX_RATE_BPS as f64 {
        return Err(UnitError(format!(
            "'{text}': more than the largest accepted, 10tbit"
        )));
    }
    Ok((bps >= 1.0).then_some(bps as u64))
}

/// A queue limit: slots, or bytes with a `K`/`B` suffix.
pub(super) fn queue(text: &str) -> Result<QueueLimit, UnitError> {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let Ok(n) = text[..end].parse::<u64>() else {
        return units::parse_size_bytes(text).map(QueueLimit::Bytes);
    };
    let too_large = || UnitError(format!("'{text}': more than the largest accepted, 1TiB"));
    let bytes = |b: Option<u64>| {
        b.filter(|&b| b <= units::MAX_SIZE_BYTES)
            .map(QueueLimit::Bytes)
            .ok_or_else(too_large)
    };
    match &text[end..] {
        "" => Ok(QueueLimit::Slots(n)),
        "K" | "k" | "KB" | "kB" | "KBytes" | "Kbytes" | "KByte" | "Kbyte" => {
            bytes(n.checked_mul(1024))
        }
        "B" | "b" | "bytes" | "Bytes" | "byte" | "Byte" => bytes(Some(n)),
        _ => units::parse_size_bytes(text).map(QueueLimit::Bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_times_are_milliseconds() {
        assert_eq!(time_ns("20"), Ok(20_000_000));
        assert_eq!(time_ns("0.5"), Ok(500_000));
        assert_eq!(time_ns("250us"), Ok(250_000));
        assert!(time_ns("20x").is_err());
    }

    #[test]
    fn bounds_are_linkems_whatever_the_spelling() {
        // Found by the `words` fuzz target: a bare bit/s above 10 Tbit/s was taken,
        // and the pipe's own description then did not read back.
        assert!(bw_bps("10011111111111").is_err());
        assert_eq!(bw_bps("10000000000000"), Ok(Some(units::MAX_RATE_BPS)));
        assert!(bw_bps("2TByte/s").is_err());
        assert!(time_ns("86400001").is_err());
        assert_eq!(time_ns("86400000"), Ok(units::MAX_TIME_NS));
        assert!(queue("1073741825K").is_err());
        assert_eq!(
            queue("1073741824K"),
            Ok(QueueLimit::Bytes(units::MAX_SIZE_BYTES))
        );
    }

    #[test]
    fn bandwidth_as_ipfw_reads_it() {
        assert_eq!(bw_bps("3Mbit/s"), Ok(Some(3_000_000)));
        assert_eq!(bw_bps("100Kbit/s"), Ok(Some(100_000)));
        assert_eq!(bw_bps("1MByte/s"), Ok(Some(8_000_000)));
        assert_eq!(bw_bps("2000000"), Ok(Some(2_000_000)));
        assert_eq!(bw_bps("3M"), Ok(Some(3_000_000)));
        assert_eq!(bw_bps("10Mbps"), Ok(Some(10_000_000)));
        assert_eq!(bw_bps("10MBps"), Ok(Some(80_000_000)));
        assert_eq!(bw_bps("1.5Gbit/s"), Ok(Some(1_500_000_000)));
        assert_eq!(bw_bps("1mibit"), Ok(Some(1_048_576)));
        assert_eq!(bw_bps("0"), Ok(None));
        assert!(bw_bps("em0").unwrap_err().0.contains("not supported"));
        assert!(bw_bps("3Mfoo").is_err());
    }

    #[test]
    fn queue_in_slots_or_bytes() {
        assert_eq!(queue("50"), Ok(QueueLimit::Slots(50)));
        assert_eq!(queue("64KBytes"), Ok(QueueLimit::Bytes(65_536)));
        assert_eq!(queue("10K"), Ok(QueueLimit::Bytes(10_240)));
        assert_eq!(queue("1500B"), Ok(QueueLimit::Bytes(1500)));
        assert_eq!(queue("1MiB"), Ok(QueueLimit::Bytes(1_048_576)));
        assert!(queue("50x").is_err());
    }
}

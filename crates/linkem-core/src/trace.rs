//! Link traces in mahimahi's format (`trace FILE`, `trace-once FILE`).
//!
//! # The file
//! One line per delivery opportunity: a whole number of milliseconds from the
//! trace's start. The offsets never decrease and the last one is not zero; a
//! repeated offset is one more opportunity at that instant. Blank lines and
//! anything but digits (around white space) are refused with the file, the
//! line and the problem, as mahimahi refuses them.
//!
//! # Opportunities
//! With offsets `o_0 ≤ … ≤ o_{N-1}` (ms), `o_{N-1} > 0`, opportunity k
//! (k = 0, 1, …, counting across loops) falls at
//!
//! ```text
//! T_k = t0 + (⌊k / N⌋ · o_{N-1} + o_{k mod N}) · 10^6 ns
//! ```
//!
//! (the base moves by the last offset at each loop, mahimahi's
//! `base_timestamp_ += schedule_.back()`); with `trace-once` only k < N exist.
//! t0 is the link's start live ([`crate::Link::start_at`], which a recording
//! keeps), the first packet's arrival in a replay of a capture, or the
//! instant a change put the trace on a running link.
//! Each opportunity carries up to [`OPPORTUNITY_BYTES`] (1504) bytes. How a
//! link spends them is in [`crate::link`] (step 6).

use std::sync::Arc;

/// Bytes one delivery opportunity carries (mahimahi's `PACKET_SIZE`).
pub const OPPORTUNITY_BYTES: u32 = 1504;

/// Bytes of the link-layer header that a trace does not count: the bytes it
/// counts are the IP packet's, as mahimahi's TUN device sees them, and the
/// frames linkem carries are Ethernet frames.
pub const TRACE_L2_HEADER_BYTES: u32 = 14;

/// Most lines a trace may have (a 16 MiB file holds fewer).
const MAX_LINES: usize = 1 << 24;

/// A parsed trace: the name it was given by, its offsets, and whether it loops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// The file's name as the words gave it.
    pub name: String,
    /// `trace-once`: no opportunity after the last line.
    pub once: bool,
    /// Offsets of the opportunities in ms, non-decreasing, the last non-zero.
    offsets_ms: Arc<[u64]>,
}

impl Trace {
    /// Reads a trace file's text. The error names the file, the line and the
    /// problem: `trace 'up.trace' line 3: ...`.
    pub fn parse(name: &str, text: &str, once: bool) -> Result<Trace, String> {
        let word = if once { "trace-once" } else { "trace" };
        let err = |line: usize, msg: String| format!("{word} '{name}' line {line}: {msg}");
        let mut offsets: Vec<u64> = Vec::new();
        // `lines` drops one final newline, as mahimahi's getline loop does.
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            if n > MAX_LINES {
                return Err(err(n, format!("more than {MAX_LINES} lines")));
            }
            let field = line.trim();
            if field.is_empty() {
                return Err(err(n, "empty line (each line is one offset in ms)".into()));
            }
            if !field.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err(
                    n,
                    "expected a whole number of milliseconds (digits only)".into(),
                ));
            }
            // Offsets beyond 2^40 ms (35 years) would overflow the ns arithmetic.
            let ms: u64 = match field.parse() {
                Ok(ms) if ms <= 1 << 40 => ms,
                _ => return Err(err(n, "the offset is above 2^40 ms (35 years)".into())),
            };
            if let Some(&last) = offsets.last() {
                if ms < last {
                    return Err(err(
                        n,
                        "the offset is below the line above: offsets never decrease".into(),
                    ));
                }
            }
            offsets.push(ms);
        }
        match offsets.last() {
            None => Err(format!("{word} '{name}': no offsets (the file is empty)")),
            Some(0) => Err(err(
                offsets.len(),
                "the last offset is 0 ms: a trace must last a non-zero time".into(),
            )),
            Some(_) => Ok(Trace {
                name: name.to_string(),
                once,
                offsets_ms: offsets.into(),
            }),
        }
    }

    /// Opportunities per loop (lines of the file).
    pub fn len(&self) -> usize {
        self.offsets_ms.len()
    }

    /// Never true: a trace has at least one line.
    pub fn is_empty(&self) -> bool {
        self.offsets_ms.is_empty()
    }

    /// The offsets in ms, one per line.
    pub fn offsets_ms(&self) -> &[u64] {
        &self.offsets_ms
    }

    /// ns from t0 to opportunity `k`, or `None` past the end of a
    /// `trace-once` (or beyond u64 ns).
    pub fn opportunity_ns(&self, k: u64) -> Option<u64> {
        let n = self.offsets_ms.len() as u64;
        let (cycle, j) = (k / n, (k % n) as usize);
        if self.once && cycle > 0 {
            return None;
        }
        let period_ms = *self.offsets_ms.last()? as u128;
        let ms = cycle as u128 * period_ms + self.offsets_ms[j] as u128;
        u64::try_from(ms * 1_000_000).ok()
    }

    /// The first opportunity strictly after `rel_ns` ns from t0, or `None`
    /// when a `trace-once` has none left.
    pub fn first_after(&self, rel_ns: u64) -> Option<u64> {
        let n = self.offsets_ms.len() as u64;
        let period_ns = *self.offsets_ms.last()? * 1_000_000;
        let (cycle, within_ns) = (rel_ns / period_ns, rel_ns % period_ns);
        // Offsets in ns are ≤ within_ns for the first j lines.
        let j = self
            .offsets_ms
            .partition_point(|&ms| ms * 1_000_000 <= within_ns) as u64;
        let k = cycle * n + j;
        (!self.once || k < n).then_some(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opportunities_loop_with_the_base_moving_by_the_last_offset() {
        let t = Trace::parse("t", "0\n0\n5\n10\n", false).unwrap();
        let times: Vec<u64> = (0..9)
            .map(|k| t.opportunity_ns(k).unwrap() / 1_000_000)
            .collect();
        assert_eq!(times, [0, 0, 5, 10, 10, 10, 15, 20, 20]);
        assert_eq!(t.first_after(0), Some(2));
        assert_eq!(t.first_after(4_999_999), Some(2));
        assert_eq!(t.first_after(5_000_000), Some(3));
        assert_eq!(t.first_after(10_000_000), Some(6));
        let once = Trace::parse("t", "0\n0\n5\n10\n", true).unwrap();
        assert_eq!(once.first_after(9_000_000), Some(3));
        assert_eq!(once.first_after(10_000_000), None);
        assert_eq!(once.opportunity_ns(4), None);
    }

    #[test]
    fn errors_name_the_file_the_line_and_the_problem() {
        let e = |text: &str| Trace::parse("up.trace", text, false).unwrap_err();
        assert_eq!(e(""), "trace 'up.trace': no offsets (the file is empty)");
        assert!(e("1\n\n2\n").starts_with("trace 'up.trace' line 2: empty line"));
        assert_eq!(
            e("1\n2ms\n"),
            "trace 'up.trace' line 2: expected a whole number of milliseconds (digits only)"
        );
        assert!(e("1\n-2\n").contains("line 2"));
        assert!(e("5\n3\n").starts_with("trace 'up.trace' line 2: the offset is below"));
        assert!(e("0\n0\n").starts_with("trace 'up.trace' line 2: the last offset is 0"));
        assert!(e("99999999999999999999999\n").contains("above 2^40 ms"));
        let once = Trace::parse("x", "0\n", true).unwrap_err();
        assert!(once.starts_with("trace-once 'x' line 1:"), "{once}");
        // A final newline, CRLF ends and spaces around a number are fine.
        assert_eq!(
            Trace::parse("t", " 1\r\n2 \r\n", false)
                .unwrap()
                .offsets_ms(),
            [1, 2]
        );
    }
}

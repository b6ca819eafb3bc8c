//! What a probe run measured, computed from timestamps alone (no I/O), so that
//! every figure is tested on synthetic series with known answers.
//!
//! Inputs: the send time of each sequence number (from the sender) and the
//! receptions in arrival order (sequence number, receive time), all in ns of
//! one clock.
//!
//! Percentiles are exact (sorted series, not histogram buckets): a 10 ms delay
//! in an HDR histogram at 3 significant digits would be rounded to 8 µs, more
//! than the deviations this measures.

use serde::Serialize;

/// A gap shorter than this counts as back to back: the two packets form (part
/// of) a burst. 20 µs is above what a sender or the kernel puts between two
/// packets it sends at once, and below the gap of any paced rate up to 50 kpps.
pub const BURST_GAP_NS: u64 = 20_000;

/// Percentiles of a distribution in ns (signed: a deviation can be negative).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub min: i64,
    pub p50: i64,
    pub p99: i64,
    pub p99_9: i64,
    pub p99_99: i64,
    pub max: i64,
    pub mean: f64,
}

impl Percentiles {
    /// The same distribution minus `by_ns` (a deviation from an expected value).
    pub fn shifted(&self, by_ns: i64) -> Percentiles {
        Percentiles {
            count: self.count,
            min: self.min - by_ns,
            p50: self.p50 - by_ns,
            p99: self.p99 - by_ns,
            p99_9: self.p99_9 - by_ns,
            p99_99: self.p99_99 - by_ns,
            max: self.max - by_ns,
            mean: self.mean - by_ns as f64,
        }
    }
}

/// Exact percentiles of `v` (sorted here).
pub fn percentiles(v: &mut [i64]) -> Percentiles {
    if v.is_empty() {
        return Percentiles::default();
    }
    v.sort_unstable();
    let sum: i128 = v.iter().map(|&x| x as i128).sum();
    Percentiles {
        count: v.len() as u64,
        min: v[0],
        p50: quantile(v, 0.5),
        p99: quantile(v, 0.99),
        p99_9: quantile(v, 0.999),
        p99_99: quantile(v, 0.9999),
        max: v[v.len() - 1],
        mean: sum as f64 / v.len() as f64,
    }
}

/// The value at quantile `q` of a sorted series (nearest rank).
pub fn quantile(sorted: &[i64], q: f64) -> i64 {
    let n = sorted.len();
    if n == 0 {
        return 0;
    }
    sorted[((q * n as f64).ceil() as usize).clamp(1, n) - 1]
}

/// Everything a probe run reports.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Analysis {
    pub sent: u64,
    /// Distinct sequence numbers received.
    pub received: u64,
    pub lost: u64,
    pub loss_ratio: f64,
    /// Receptions of a sequence number already received.
    pub duplicates: u64,
    /// Packets that arrived after a packet sent later than them.
    pub reordered: u64,
    /// One-way delay (receive − send).
    pub delay_ns: Percentiles,
    /// One-way delay minus the expected delay.
    pub deviation_ns: Percentiles,
    pub expected_delay_ns: u64,
    /// Gaps between consecutive sends, and between consecutive receptions of
    /// consecutive sequence numbers.
    pub send_gap_ns: Percentiles,
    pub recv_gap_ns: Percentiles,
    /// |receive gap − send gap| over the same pairs.
    pub gap_change_ns: Percentiles,
    /// Sending error: actual send time − scheduled send time.
    pub send_error_ns: Percentiles,
    /// Pairs sent apart (gap ≥ [`BURST_GAP_NS`]) that arrived back to back.
    pub bursts_added: u64,
    /// Pairs sent back to back that arrived apart.
    pub bursts_split: u64,
    /// Pairs compared for the gap figures.
    pub gap_pairs: u64,
}

/// The series behind an [`Analysis`], sorted, for plots.
pub struct Series {
    pub delay_ns: Vec<i64>,
    pub send_gap_ns: Vec<i64>,
    pub recv_gap_ns: Vec<i64>,
}

/// Computes the figures of one run. `scheduled_ns[i]` is when packet i was
/// meant to leave, `sent_ns[i]` when it did; `received` is in arrival order.
pub fn analyse(
    scheduled_ns: &[u64],
    sent_ns: &[u64],
    received: &[(u64, u64)],
    expected_delay_ns: u64,
) -> (Analysis, Series) {
    let n = sent_ns.len();
    let Arrivals {
        rx_of,
        mut delay,
        got,
        duplicates,
        reordered,
    } = match_received(sent_ns, received);

    let mut send_gap: Vec<i64> = sent_ns
        .windows(2)
        .map(|w| w[1] as i64 - w[0] as i64)
        .collect();
    let mut send_error: Vec<i64> = sent_ns
        .iter()
        .zip(scheduled_ns)
        .map(|(s, t)| *s as i64 - *t as i64)
        .collect();
    let Gaps {
        mut recv_gap,
        mut change,
        added,
        split,
        pairs,
    } = gap_changes(sent_ns, &rx_of);
    let delay_ns = percentiles(&mut delay);
    let analysis = Analysis {
        sent: n as u64,
        received: got,
        lost: n as u64 - got,
        loss_ratio: if n == 0 {
            0.0
        } else {
            (n as u64 - got) as f64 / n as f64
        },
        duplicates,
        reordered,
        delay_ns,
        deviation_ns: delay_ns.shifted(expected_delay_ns as i64),
        expected_delay_ns,
        send_gap_ns: percentiles(&mut send_gap),
        recv_gap_ns: percentiles(&mut recv_gap),
        gap_change_ns: percentiles(&mut change),
        send_error_ns: percentiles(&mut send_error),
        bursts_added: added,
        bursts_split: split,
        gap_pairs: pairs,
    };
    (
        analysis,
        Series {
            delay_ns: delay,
            send_gap_ns: send_gap,
            recv_gap_ns: recv_gap,
        },
    )
}

/// What became of each sequence number sent, from the receptions in arrival order.
struct Arrivals {
    /// Receive time of each sequence number's first reception, ns.
    rx_of: Vec<Option<u64>>,
    /// One-way delay of each first reception, in arrival order, ns.
    delay: Vec<i64>,
    /// Distinct sequence numbers received.
    got: u64,
    duplicates: u64,
    reordered: u64,
}

/// Matches receptions to sends: the first reception of a sequence number
/// counts, later ones are duplicates; numbers never sent are ignored.
fn match_received(sent_ns: &[u64], received: &[(u64, u64)]) -> Arrivals {
    let n = sent_ns.len();
    let mut seen = vec![false; n];
    let mut delay: Vec<i64> = Vec::with_capacity(received.len());
    let mut duplicates = 0;
    let mut reordered = 0;
    let mut highest: Option<u64> = None;
    let mut rx_of = vec![None; n];
    for &(seq, rx) in received {
        let Some(slot) = seen.get_mut(seq as usize) else {
            // A sequence number never sent: not ours.
            continue;
        };
        if *slot {
            duplicates += 1;
            continue;
        }
        *slot = true;
        rx_of[seq as usize] = Some(rx);
        if highest.is_some_and(|h| seq < h) {
            reordered += 1;
        }
        highest = Some(highest.map_or(seq, |h| h.max(seq)));
        delay.push(rx as i64 - sent_ns[seq as usize] as i64);
    }
    let got = seen.iter().filter(|&&s| s).count() as u64;
    Arrivals {
        rx_of,
        delay,
        got,
        duplicates,
        reordered,
    }
}

/// How the link changed the spacing of consecutive packets.
struct Gaps {
    /// Receive gap of each pair compared, ns.
    recv_gap: Vec<i64>,
    /// |receive gap − send gap| of each pair, ns.
    change: Vec<i64>,
    /// Pairs sent apart that arrived back to back.
    added: u64,
    /// Pairs sent back to back that arrived apart.
    split: u64,
    /// Pairs compared.
    pairs: u64,
}

/// Compares send and receive gaps over the pairs of consecutive sequence
/// numbers that both arrived, in order.
fn gap_changes(sent_ns: &[u64], rx_of: &[Option<u64>]) -> Gaps {
    let n = sent_ns.len();
    let (mut recv_gap, mut change): (Vec<i64>, Vec<i64>) = (Vec::new(), Vec::new());
    let (mut added, mut split, mut pairs) = (0, 0, 0);
    for i in 0..n.saturating_sub(1) {
        let (Some(a), Some(b)) = (rx_of[i], rx_of[i + 1]) else {
            continue;
        };
        if b < a {
            continue;
        }
        let g_in = sent_ns[i + 1].saturating_sub(sent_ns[i]);
        let g_out = b - a;
        pairs += 1;
        recv_gap.push(g_out as i64);
        change.push(g_in.abs_diff(g_out) as i64);
        if g_in >= BURST_GAP_NS && g_out < BURST_GAP_NS {
            added += 1;
        }
        if g_in < BURST_GAP_NS && g_out >= BURST_GAP_NS {
            split += 1;
        }
    }
    Gaps {
        recv_gap,
        change,
        added,
        split,
        pairs,
    }
}

/// The upper bound of a binomial loss count at about 99.9 % confidence
/// (normal approximation, 3.3 standard deviations, at least one packet).
pub fn loss_bound(sent: u64, p: f64) -> f64 {
    let n = sent.max(1) as f64;
    p + 3.3 * (p * (1.0 - p) / n).sqrt() + 1.0 / n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn even(n: u64, gap: u64) -> Vec<u64> {
        (0..n).map(|i| 1_000_000 + i * gap).collect()
    }

    #[test]
    fn a_perfect_path_shows_its_delay_and_keeps_every_gap() {
        let sent = even(1000, 100_000);
        let rx: Vec<(u64, u64)> = sent
            .iter()
            .enumerate()
            .map(|(i, s)| (i as u64, s + 10_000_000))
            .collect();
        let (a, _) = analyse(&sent, &sent, &rx, 10_000_000);
        assert_eq!(
            (a.sent, a.received, a.lost, a.duplicates, a.reordered),
            (1000, 1000, 0, 0, 0)
        );
        assert_eq!(a.delay_ns.p50, 10_000_000);
        assert_eq!(a.deviation_ns.p50, 0);
        assert_eq!(a.deviation_ns.max, 0);
        assert_eq!(a.gap_pairs, 999);
        assert_eq!(a.gap_change_ns.max, 0);
        assert_eq!(a.recv_gap_ns.p50, 100_000);
        assert_eq!((a.bursts_added, a.bursts_split), (0, 0));
        assert_eq!(a.send_error_ns.max, 0);
    }

    #[test]
    fn loss_duplicates_and_reordering_are_counted_once_each() {
        let sent = even(10, 1_000_000);
        // 3 and 7 lost; 5 twice; 2 arrives after 4.
        let order = [0u64, 1, 4, 2, 5, 5, 6, 8, 9];
        let rx: Vec<(u64, u64)> = order
            .iter()
            .enumerate()
            .map(|(k, &s)| (s, 20_000_000 + k as u64 * 1_000_000))
            .collect();
        let (a, _) = analyse(&sent, &sent, &rx, 0);
        assert_eq!(a.received, 8);
        assert_eq!(a.lost, 2);
        assert_eq!(a.duplicates, 1);
        assert_eq!(a.reordered, 1);
        assert!((a.loss_ratio - 0.2).abs() < 1e-12);
    }

    #[test]
    fn a_path_that_batches_adds_bursts_and_one_that_spreads_splits_them() {
        // Constant 100 us input; the output delivers pairs together.
        let sent = even(100, 100_000);
        let rx: Vec<(u64, u64)> = (0..100u64)
            .map(|i| (i, 5_000_000 + (i / 2) * 200_000 + (i % 2) * 1_000))
            .collect();
        let (a, h) = analyse(&sent, &sent, &rx, 0);
        assert_eq!(a.gap_pairs, 99);
        assert_eq!(a.bursts_added, 50, "every second pair is glued");
        assert_eq!(a.bursts_split, 0);
        assert_eq!(h.recv_gap_ns.len(), 99);
        // Bursts of 4 back to back (1 us apart); the output spaces every packet 50 us.
        let sent: Vec<u64> = (0..40u64)
            .map(|i| (i / 4) * 1_000_000 + (i % 4) * 1_000)
            .collect();
        let rx: Vec<(u64, u64)> = (0..40u64)
            .map(|i| (i, 3_000_000 + i * 50_000 + (i / 4) * 1_000_000))
            .collect();
        let (a, _) = analyse(&sent, &sent, &rx, 0);
        assert_eq!(a.bursts_split, 30, "3 pairs in each of 10 bursts");
        assert_eq!(a.bursts_added, 0);
    }

    #[test]
    fn deviation_and_send_error_are_signed_shifts() {
        let sched = even(4, 1_000_000);
        let sent: Vec<u64> = sched
            .iter()
            .zip([0u64, 5, 10, 2_000])
            .map(|(s, e)| s + e)
            .collect();
        let rx: Vec<(u64, u64)> = sent
            .iter()
            .enumerate()
            .map(|(i, s)| (i as u64, s + 9_990_000))
            .collect();
        let (a, _) = analyse(&sched, &sent, &rx, 10_000_000);
        assert_eq!(a.deviation_ns.p50, -10_000);
        assert_eq!(a.deviation_ns.max, -10_000);
        assert_eq!(a.send_error_ns.max, 2_000);
        assert_eq!(a.send_error_ns.min, 0);
    }

    #[test]
    fn unknown_sequence_numbers_and_empty_runs_do_not_panic() {
        let (a, _) = analyse(&[], &[], &[(5, 1)], 0);
        assert_eq!((a.sent, a.received, a.lost), (0, 0, 0));
        assert_eq!(a.delay_ns, Percentiles::default());
    }

    #[test]
    fn the_loss_bound_covers_its_expectation() {
        assert!(loss_bound(100_000, 0.01) > 0.01 && loss_bound(100_000, 0.01) < 0.0112);
        assert!(loss_bound(0, 0.0) >= 1.0);
    }
}

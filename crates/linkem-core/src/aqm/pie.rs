//! PIE, Proportional Integral controller Enhanced.
//!
//! # Reference
//! RFC 8033 (R. Pan et al.), §4-5 and Appendix A (basic PIE, no
//! derandomisation).
//!
//! Synopsis (Dummynet): `pie [target T] [tupdate T] [alpha A] [beta B]
//! [max_burst T] [max_ecnth P] [ecn|noecn]`; defaults target (QDELAY_REF)
//! 15 ms, tupdate 15 ms, alpha 0.125, beta 1.25, max_burst 150 ms,
//! max_ecnth 0.1, noecn (fq_pie: ecn).
//!
//! Every `tupdate` (at t = k·tupdate from the queue's creation):
//! `p = α·(qdelay − ref) + β·(qdelay − qdelay_old)` (seconds, α and β in 1/s),
//! scaled down while drop_prob is small (÷2048 below 10⁻⁶, ÷512 below 10⁻⁵,
//! ÷128 below 10⁻⁴, ÷32 below 10⁻³, ÷8 below 10⁻², ÷2 below 10⁻¹), capped
//! at 0.02 once drop_prob ≥ 0.1; `drop_prob += p`; decays ×0.98 when qdelay
//! and qdelay_old are both 0; clamped to [0, 1]; `qdelay_old ← qdelay`;
//! `burst_allowance ← max(0, burst_allowance − tupdate)`, and back to
//! max_burst when drop_prob = 0 and both delays are below ref/2.
//!
//! At enqueue (after the tail-drop check): accept while burst_allowance > 0,
//! while `qdelay_old < ref/2 ∧ drop_prob < 0.2`, or while at most two
//! 1500-byte packets are queued; otherwise drop with probability drop_prob
//! (ECT packets are marked instead when ECN is on and drop_prob ≤ max_ecnth).
//!
//! qdelay is the sojourn time of the packet at the head of the queue at the
//! update instant (0 when empty): the timestamp method of RFC 8033 §5.3.
//! The periodic updates are run lazily, before each enqueue and dequeue, for
//! every period boundary ≤ now (queue state only changes at those events, so
//! this is exact); an idle queue with drop_prob 0 skips the empty periods, and
//! a queue whose drop_prob is pegged at 1 behind a head that keeps waiting
//! skips to the last period (only qdelay_old would change: see
//! `Pie::saturated`); past `MAX_UPDATES_PER_CALL` (2²⁰) periods of one wait the
//! same skip is taken as an approximation, so no input costs unbounded time.

use super::{drop_or_mark, Admit, DropCause};

/// Periods one call of [`Pie::catch_up`] runs one by one while a packet waits.
/// Beyond it (a state still changing after 2²⁰ periods with one head packet:
/// only a tupdate far below its default on a link that holds a packet for
/// seconds gets there), the rest of that wait keeps drop_prob and the burst
/// allowance as they are: an approximation, chosen over an unbounded loop.
const MAX_UPDATES_PER_CALL: u32 = 1 << 20;

/// PIE's parameters for one queue (`pie [target T] [tupdate T] [alpha A]
/// [beta B] [max_burst T] [max_ecnth P] [ecn|noecn]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PieConfig {
    /// The queueing delay PIE steers towards, ns (RFC 8033 QDELAY_REF;
    /// default 15 ms).
    pub target_ns: u64,
    /// Period of the drop probability update, ns (RFC 8033 T_UPDATE; default
    /// 15 ms; above 0).
    pub tupdate_ns: u64,
    /// Gain on the distance from target, 1/s (default 0.125): each update adds
    /// `alpha·(qdelay − target)` (qdelay in s) before the small-probability
    /// scaling.
    pub alpha: f64,
    /// Gain on the delay's trend, 1/s (default 1.25): each update adds
    /// `beta·(qdelay − qdelay_old)`.
    pub beta: f64,
    /// Burst allowance, ns (RFC 8033 MAX_BURST; default 150 ms): no packet is
    /// dropped early while the allowance left is above 0; each update takes
    /// `tupdate` off it, and it is refilled to this value whenever the queue
    /// is calm (drop probability 0, current and previous delay below
    /// target/2).
    pub max_burst_ns: u64,
    /// With `ecn`, ECT packets are marked instead of dropped only while the
    /// drop probability is at most this (default 0.1); above it they are
    /// dropped like the rest.
    pub max_ecnth: f64,
    /// Mark ECT packets CE instead of dropping them (up to `max_ecnth`);
    /// default off, on for fq_pie's flows.
    pub ecn: bool,
}

impl Default for PieConfig {
    fn default() -> Self {
        PieConfig {
            target_ns: 15_000_000,
            tupdate_ns: 15_000_000,
            alpha: 0.125,
            beta: 1.25,
            max_burst_ns: 150_000_000,
            max_ecnth: 0.1,
            ecn: false,
        }
    }
}

/// RFC 8033's MEAN_PKTSIZE, bytes: with at most two such packets queued
/// (`2·MEAN_PKTSIZE` bytes) no packet is dropped early.
pub const MEAN_PKTSIZE: u64 = 1500;

/// PIE's state for one queue: the drop probability, the delay seen at the
/// last update, the burst allowance left and when the next update is due.
#[derive(Debug, Clone)]
pub struct Pie {
    /// The current drop probability, in [0, 1], as of the last update run by
    /// [`Pie::catch_up`].
    pub drop_prob: f64,
    qdelay_old_ns: u64,
    burst_allowance_ns: u64,
    next_update_ns: u64,
}

impl Pie {
    /// The state of a new queue: drop probability 0, the full `max_burst`
    /// allowance, first update at `tupdate` after creation (time 0).
    pub fn new(cfg: &PieConfig) -> Self {
        Pie {
            drop_prob: 0.0,
            qdelay_old_ns: 0,
            burst_allowance_ns: cfg.max_burst_ns,
            next_update_ns: cfg.tupdate_ns,
        }
    }

    /// Runs the periodic updates due by `now_ns`; `head_enq_ns` is the
    /// enqueue time of the head packet (None: empty queue).
    pub fn catch_up(&mut self, cfg: &PieConfig, now_ns: u64, head_enq_ns: Option<u64>) {
        let mut done = 0u32;
        while self.next_update_ns <= now_ns {
            let t = self.next_update_ns;
            let qdelay = head_enq_ns.map_or(0, |e| t.saturating_sub(e));
            if head_enq_ns.is_none()
                && self.drop_prob == 0.0
                && self.qdelay_old_ns == 0
                && self.burst_allowance_ns == cfg.max_burst_ns
                && cfg.target_ns / 2 > 0
            {
                // Nothing changes until the queue fills again.
                let periods = (now_ns - t) / cfg.tupdate_ns + 1;
                self.next_update_ns = t + periods * cfg.tupdate_ns;
                break;
            }
            self.update(cfg, qdelay);
            self.next_update_ns = t + cfg.tupdate_ns;
            done += 1;
            if let Some(e) = head_enq_ns {
                let fixed = self.saturated(cfg, qdelay) || done >= MAX_UPDATES_PER_CALL;
                if fixed && self.next_update_ns <= now_ns {
                    // Every further update before the next event leaves drop_prob
                    // at 1 and the burst allowance at 0, and only stores its qdelay
                    // (past MAX_UPDATES_PER_CALL: taken as so).
                    let k = (now_ns - self.next_update_ns) / cfg.tupdate_ns;
                    let last = self.next_update_ns + k * cfg.tupdate_ns;
                    self.qdelay_old_ns = last.saturating_sub(e);
                    self.next_update_ns = last + cfg.tupdate_ns;
                    break;
                }
            }
        }
    }

    /// True when, with the same head packet (its qdelay only growing), no
    /// later update can change drop_prob or the burst allowance: drop_prob is
    /// pegged at 1 (p ≥ 0 once qdelay ≥ ref, since α, β ≥ 0 and qdelay ≥
    /// qdelay_old), and the allowance is spent and cannot be reset (that needs
    /// drop_prob = 0). A link slow enough to hold one packet for hours (1 bit/s
    /// with a tupdate of microseconds) would otherwise cost one update per
    /// period: billions.
    fn saturated(&self, cfg: &PieConfig, qdelay_ns: u64) -> bool {
        self.drop_prob >= 1.0
            && self.burst_allowance_ns == 0
            && qdelay_ns >= cfg.target_ns
            && cfg.alpha >= 0.0
            && cfg.beta >= 0.0
    }

    fn update(&mut self, cfg: &PieConfig, qdelay_ns: u64) {
        let sec = |ns: u64| ns as f64 * 1e-9;
        let (q, old, r) = (sec(qdelay_ns), sec(self.qdelay_old_ns), sec(cfg.target_ns));
        let mut p = cfg.alpha * (q - r) + cfg.beta * (q - old);
        let dp = self.drop_prob;
        if dp < 0.000001 {
            p /= 2048.0;
        } else if dp < 0.00001 {
            p /= 512.0;
        } else if dp < 0.0001 {
            p /= 128.0;
        } else if dp < 0.001 {
            p /= 32.0;
        } else if dp < 0.01 {
            p /= 8.0;
        } else if dp < 0.1 {
            p /= 2.0;
        }
        if dp >= 0.1 && p > 0.02 {
            p = 0.02;
        }
        self.drop_prob += p;
        if qdelay_ns == 0 && self.qdelay_old_ns == 0 {
            self.drop_prob *= 0.98;
        }
        self.drop_prob = self.drop_prob.clamp(0.0, 1.0);
        self.burst_allowance_ns = self.burst_allowance_ns.saturating_sub(cfg.tupdate_ns);
        if self.drop_prob == 0.0
            && qdelay_ns < cfg.target_ns / 2
            && self.qdelay_old_ns < cfg.target_ns / 2
        {
            self.burst_allowance_ns = cfg.max_burst_ns;
        }
        self.qdelay_old_ns = qdelay_ns;
    }

    /// The early decision for an arrival that found `queued_bytes` queued
    /// (call [`Pie::catch_up`] first).
    pub fn arrive(
        &mut self,
        cfg: &PieConfig,
        queued_bytes: u64,
        ect: bool,
        draw: &mut dyn FnMut() -> f64,
    ) -> Admit {
        if self.burst_allowance_ns > 0 {
            return Admit::Accept;
        }
        if self.qdelay_old_ns < cfg.target_ns / 2 && self.drop_prob < 0.2 {
            return Admit::Accept;
        }
        if queued_bytes <= 2 * MEAN_PKTSIZE {
            return Admit::Accept;
        }
        if draw() < self.drop_prob {
            if self.drop_prob <= cfg.max_ecnth {
                drop_or_mark(cfg.ecn, ect, DropCause::Aqm)
            } else {
                Admit::Drop(DropCause::Aqm)
            }
        } else {
            Admit::Accept
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(tupdate_ns: u64) -> PieConfig {
        PieConfig {
            target_ns: 15_000_000,
            tupdate_ns,
            alpha: 0.125,
            beta: 1.25,
            max_burst_ns: 150_000_000,
            ..PieConfig::default()
        }
    }

    /// The updates one at a time, as RFC 8033 runs them.
    fn naive(pie: &mut Pie, cfg: &PieConfig, now_ns: u64, head_enq_ns: u64) {
        while pie.next_update_ns <= now_ns {
            let t = pie.next_update_ns;
            pie.update(cfg, t - head_enq_ns);
            pie.next_update_ns = t + cfg.tupdate_ns;
        }
    }

    #[test]
    fn a_head_waiting_for_hours_costs_no_more_than_saturation() {
        // 1 µs updates, a head packet waiting from t = 0: drop_prob reaches 1
        // after some ten thousand updates; the state at any later time equals
        // the update-by-update result.
        let c = cfg(1_000);
        for now in [1_000_000u64, 50_000_000, 200_000_000, 200_000_999] {
            let (mut fast, mut slow) = (Pie::new(&c), Pie::new(&c));
            fast.catch_up(&c, now, Some(0));
            naive(&mut slow, &c, now, 0);
            assert_eq!(
                (
                    fast.drop_prob,
                    fast.burst_allowance_ns,
                    fast.qdelay_old_ns,
                    fast.next_update_ns
                ),
                (
                    slow.drop_prob,
                    slow.burst_allowance_ns,
                    slow.qdelay_old_ns,
                    slow.next_update_ns
                ),
                "at {now} ns"
            );
        }
        // Ten hours of 1 µs periods: 3.6e10 updates one by one, here a jump.
        let mut p = Pie::new(&c);
        p.catch_up(&c, 36_000_000_000_000, Some(0));
        assert_eq!(p.drop_prob, 1.0);
        assert_eq!(p.qdelay_old_ns, 36_000_000_000_000);
        assert_eq!(p.next_update_ns, 36_000_000_001_000);
    }

    #[test]
    fn a_state_that_never_settles_is_bounded_not_looped() {
        // α = β = 0: drop_prob never moves, and while qdelay < ref/2 the burst
        // allowance is reset every period: 1.8e12 periods of 1 ns before qdelay
        // reaches ref/2 = 1800 s. The call ends after MAX_UPDATES_PER_CALL.
        let c = PieConfig {
            target_ns: 3_600_000_000_000,
            tupdate_ns: 1,
            alpha: 0.0,
            beta: 0.0,
            max_burst_ns: 150_000_000,
            ..PieConfig::default()
        };
        let mut p = Pie::new(&c);
        p.catch_up(&c, 3_600_000_000_000, Some(0));
        assert_eq!(p.drop_prob, 0.0);
        assert_eq!(p.qdelay_old_ns, 3_600_000_000_000);
        assert_eq!(p.next_update_ns, 3_600_000_000_001);
    }
}

//! RED and gentle RED (GRED).
//!
//! # Reference
//! S. Floyd, V. Jacobson, "Random Early Detection Gateways for Congestion
//! Avoidance", IEEE/ACM ToN 1(4), 1993, Figure 2; S. Floyd, "Recommendations
//! on using the gentle variant of RED", 2000.
//!
//! Synopsis (Dummynet): `red|gred w_q/min_th/max_th/max_p`, thresholds in
//! packets, or in bytes when the queue is sized in bytes.
//!
//! For each arriving packet, with q the queue length it finds:
//! - queue non-empty: `avg ← (1 − w_q)·avg + w_q·q`;
//! - queue empty: `avg ← (1 − w_q)^m · avg`, m = (now − q_time)/s, q_time
//!   the instant the queue last emptied and s the transmission time of a
//!   1500-byte packet at the pipe's rate (no decay without a rate);
//! - `min_th ≤ avg < max_th`: `count ← count + 1`,
//!   `p_b = max_p·(avg − min_th)/(max_th − min_th)`,
//!   `p_a = p_b/(1 − count·p_b)` (1 once `count·p_b ≥ 1`); with probability
//!   p_a the packet is dropped (or marked) and `count ← 0`;
//! - gentle, `max_th ≤ avg < 2·max_th`: the same with
//!   `p_b = max_p + (1 − max_p)·(avg − max_th)/max_th`;
//! - above (`avg ≥ max_th`, gentle: `≥ 2·max_th`): drop, `count ← 0`;
//! - below min_th: `count ← −1`.
//!
//! Defaults: none (all four values are given, as in Dummynet). Limits:
//! 0 < w_q ≤ 1, 0 < max_p ≤ 1, min_th < max_th.

use super::{drop_or_mark, Admit, DropCause};

/// RED's parameters for one queue (`red|gred w_q/min_th/max_th/max_p`).
///
/// `min_th` and `max_th` are in the unit the queue is measured in: packets,
/// or bytes when the queue's limit is given in bytes. Invariants (checked by
/// the parser): 0 < `w_q` ≤ 1, 0 < `max_p` ≤ 1, `min_th` < `max_th`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RedConfig {
    /// Weight of the newest sample in the average queue length (the EWMA
    /// `avg ← (1 − w_q)·avg + w_q·q`); the average follows the queue over
    /// about 1/w_q arrivals (Floyd & Jacobson suggest 0.002).
    pub w_q: f64,
    /// Below this average queue length no packet is dropped early (packets,
    /// or bytes for a byte-sized queue).
    pub min_th: u64,
    /// At this average the early drop probability p_b reaches `max_p`; at or
    /// above it every arrival is dropped (with `gentle`, only from 2·max_th).
    pub max_th: u64,
    /// The largest early drop probability p_b of the linear part, reached at
    /// `avg = max_th`.
    pub max_p: f64,
    /// Gentle RED (`gred`): between max_th and 2·max_th, p_b rises linearly
    /// from `max_p` to 1 instead of jumping to 1.
    pub gentle: bool,
    /// An ECT packet selected for an early drop is marked CE and queued
    /// instead; the forced drops above max_th (2·max_th gentle) stay drops.
    pub ecn: bool,
}

/// RED's state for one queue: the average queue length, the arrivals since
/// the last early drop, and when the queue last went empty.
#[derive(Debug, Clone)]
pub struct Red {
    /// The average queue length `avg`, in the queue's unit (packets or bytes),
    /// as of the last arrival; 0 for a new queue.
    pub avg: f64,
    count: i64,
    /// When the queue last became empty.
    q_time_ns: Option<u64>,
}

impl Default for Red {
    fn default() -> Self {
        Self::new()
    }
}

impl Red {
    /// The state of a new queue: `avg` 0, `count` −1, and empty since time 0
    /// (so the first arrival's idle decay runs from 0).
    pub fn new() -> Self {
        Red {
            avg: 0.0,
            count: -1,
            q_time_ns: Some(0),
        }
    }

    /// The queue has just become empty.
    pub fn emptied(&mut self, now_ns: u64) {
        self.q_time_ns = Some(now_ns);
    }

    /// Decides an arrival finding `q` (packets or bytes) queued. `s_ns` is the
    /// time to send a typical packet (0: no idle decay); `draw` gives the
    /// uniform in [0,1) when a random decision is needed.
    pub fn arrive(
        &mut self,
        cfg: &RedConfig,
        now_ns: u64,
        q: u64,
        s_ns: u64,
        ect: bool,
        draw: &mut dyn FnMut() -> f64,
    ) -> Admit {
        if q > 0 {
            self.avg = (1.0 - cfg.w_q) * self.avg + cfg.w_q * q as f64;
            self.q_time_ns = None;
        } else if let Some(t) = self.q_time_ns {
            // q_time stays until the queue fills again: Floyd & Jacobson
            // measure each empty-queue arrival from the start of the idle time.
            if let Some(m) = now_ns.saturating_sub(t).checked_div(s_ns) {
                self.avg *= (1.0 - cfg.w_q).powf(m as f64);
            }
        } else {
            self.avg *= 1.0 - cfg.w_q;
        }
        let (min, max) = (cfg.min_th as f64, cfg.max_th as f64);
        let p_b = if self.avg < min {
            self.count = -1;
            return Admit::Accept;
        } else if self.avg < max {
            cfg.max_p * (self.avg - min) / (max - min)
        } else if cfg.gentle && self.avg < 2.0 * max {
            cfg.max_p + (1.0 - cfg.max_p) * (self.avg - max) / max
        } else {
            self.count = 0;
            return Admit::Drop(DropCause::Early);
        };
        self.count += 1;
        let denom = 1.0 - self.count as f64 * p_b;
        let p_a = if denom <= 0.0 {
            1.0
        } else {
            (p_b / denom).min(1.0)
        };
        if draw() < p_a {
            self.count = 0;
            drop_or_mark(cfg.ecn, ect, DropCause::Early)
        } else {
            Admit::Accept
        }
    }
}

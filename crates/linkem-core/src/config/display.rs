//! The canonical words of a link: what `LinkConfig` prints, and what parses back
//! to the same link (in either dialect; distribution files are shown by name).

use super::{LinkConfig, LossAt};
use crate::dist::Distribution;
use crate::loss::LossConfig;
use crate::units::{format_rate_bps, format_time_ns};
use std::fmt;

fn pct(p: f64) -> String {
    let v = p * 100.0;
    // Round to 12 significant digits so that 0.07 * 100 prints as 7, not 7.000000000000001.
    let s = format!("{:.10}", v);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}%")
}

impl fmt::Display for LinkConfig {
    /// The canonical words for this link; parsing them gives the same link
    /// (distribution files are shown by name).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        self.shaping_words(&mut parts);
        self.delay_words(&mut parts);
        if let Some(l) = loss_words(&self.loss) {
            parts.push(l);
        }
        if self.loss_at == LossAt::Link {
            parts.push("loss-at link".into());
        }
        if let Some(s) = chance_words("duplicate", self.duplicate, self.duplicate_correlation) {
            parts.push(s);
        }
        if let Some(s) = chance_words("corrupt", self.corrupt, self.corrupt_correlation) {
            parts.push(s);
        }
        if let Some(s) = &self.slot {
            let mut w = match &s.distribution {
                Some((d, delay, jitter)) => format!(
                    "slot distribution {} {} {}",
                    d.name(),
                    format_time_ns(*delay),
                    format_time_ns(*jitter)
                ),
                None if s.max_ns == s.min_ns => format!("slot {}", format_time_ns(s.min_ns)),
                None => format!(
                    "slot {} {}",
                    format_time_ns(s.min_ns),
                    format_time_ns(s.max_ns)
                ),
            };
            if let Some(n) = s.packets {
                w += &format!(" packets {n}");
            }
            if let Some(b) = s.bytes {
                w += &format!(" bytes {b}B");
            }
            parts.push(w);
        }
        if let Some(s) = &self.schedule {
            parts.push(format!("schedule {}", s.name));
        }
        if let Some(p) = self.policer {
            parts.push(format!(
                "policer {} burst {}B",
                format_rate_bps(p.rate_bps),
                p.burst_bytes
            ));
        }
        f.write_str(&parts.join(" "))
    }
}

impl LinkConfig {
    /// Rate, overhead and queue.
    fn shaping_words(&self, parts: &mut Vec<String>) {
        if let Some(r) = self.rate_bps {
            parts.push(format!("rate {}", format_rate_bps(r)));
        }
        if let Some(t) = &self.trace {
            let word = if t.once { "trace-once" } else { "trace" };
            parts.push(format!("{word} {}", t.name));
        }
        if self.overhead_bytes != 0 {
            parts.push(format!("overhead {}", self.overhead_bytes));
        }
        match (self.queue_packets, self.queue_bytes) {
            (None, None) => parts.push("queue unlimited".into()),
            (Some(p), None) => parts.push(format!("queue {p}")),
            (None, Some(b)) => parts.push(format!("queue {b}B")),
            (Some(p), Some(b)) => parts.push(format!("limit {p} queue {b}B")),
        }
    }

    /// Delay, jitter, distribution and reordering.
    fn delay_words(&self, parts: &mut Vec<String>) {
        if self.delay_ns != 0 || self.jitter_ns != 0 {
            let mut d = format!("delay {}", format_time_ns(self.delay_ns));
            if self.jitter_ns != 0 {
                d += &format!(" {}", format_time_ns(self.jitter_ns));
                if self.delay_correlation != 0.0 {
                    d += &format!(" {}", pct(self.delay_correlation));
                }
            }
            parts.push(d);
        }
        if *self.distribution != Distribution::Uniform {
            parts.push(format!("distribution {}", self.distribution.name()));
        }
        if let Some(hold) = self.jitter_hold_ns {
            parts.push(format!("jitter-mode process {}", format_time_ns(hold)));
        }
        if self.reorder_allow {
            parts.push("reorder allow".into());
        }
        if self.reorder_probability > 0.0 {
            let mut r = format!("reorder {}", pct(self.reorder_probability));
            if self.reorder_correlation != 0.0 {
                r += &format!(" {}", pct(self.reorder_correlation));
            }
            if self.reorder_gap > 1 {
                r += &format!(" gap {}", self.reorder_gap);
            }
            parts.push(r);
        }
    }
}

/// `WORD P% [C%]`, or nothing for a zero probability.
fn chance_words(word: &str, p: f64, correlation: f64) -> Option<String> {
    if p <= 0.0 {
        return None;
    }
    let mut s = format!("{word} {}", pct(p));
    if correlation != 0.0 {
        s += &format!(" {}", pct(correlation));
    }
    Some(s)
}

fn loss_words(loss: &LossConfig) -> Option<String> {
    Some(match *loss {
        LossConfig::None => return None,
        LossConfig::Random { p, correlation } => {
            let mut l = format!("loss {}", pct(p));
            if correlation != 0.0 {
                l += &format!(" {}", pct(correlation));
            }
            l
        }
        LossConfig::Ber { ber } => format!("loss ber {ber:e}"),
        LossConfig::GilbertElliott {
            p,
            r,
            loss_bad,
            loss_good,
        } => format!(
            "loss gemodel {} {} {} {}",
            pct(p),
            pct(r),
            pct(loss_bad),
            pct(loss_good)
        ),
        LossConfig::FourState {
            p13,
            p31,
            p32,
            p23,
            p14,
        } => format!(
            "loss state {} {} {} {} {}",
            pct(p13),
            pct(p31),
            pct(p32),
            pct(p23),
            pct(p14)
        ),
    })
}

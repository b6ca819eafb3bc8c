//! `--stats json --stats-interval T --series`: a time series per direction, one JSON
//! line per interval `[k·T, (k+1)·T)` of the run:
//!
//! ```text
//! {"series":{"direction":"a->b","start_s":1.2,"interval_s":0.1,
//!   "arrived_packets":..,"arrived_bps":..,"delivered_packets":..,"throughput_bps":..,
//!   "delay_mean_ms":..,"delay_max_ms":..,"drops":..,"queue_max_bytes":..,"queue_max_packets":..}}
//! ```
//!
//! A packet counts in the interval of its arrival (`arrived_*`, `drops`, the
//! queue it found) and, if delivered, in that of its release
//! (`throughput_bps` = delivered bytes × 8 / T, its delay = release −
//! arrival). Bytes are the frame's. An interval is printed once it has ended
//! by [`SETTLE_NS`]: a decision comes at most that long after its arrival,
//! and a release is never before its arrival, so nothing lands in a printed
//! interval afterwards. The model's decisions are what count (the stage's own
//! drops, `late` and the like, are in the cumulative counts).
//!
//! The stage adds each decision under a mutex held for a few additions; the
//! serving loop takes the ended intervals every T.

use linkem_core::fate::Fate;
use linkem_core::model::Change;
use linkem_core::node::Decision;
use linkem_core::rules::Side;
use linkem_runtime::pipeline::Tap;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// How long after its end an interval is printed.
pub const SETTLE_NS: u64 = 50_000_000;

/// One interval of one direction.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Bin {
    pub arrived_packets: u64,
    pub arrived_bytes: u64,
    pub delivered_packets: u64,
    pub delivered_bytes: u64,
    pub delay_sum_ns: u64,
    pub delay_max_ns: u64,
    pub drops: u64,
    pub queue_max_bytes: u64,
    pub queue_max_packets: u32,
}

#[derive(Debug)]
struct Bins {
    interval_ns: u64,
    start_ns: u64,
    /// By interval index since `start_ns`, per side.
    bins: [BTreeMap<u64, Bin>; 2],
    /// The first interval not yet taken.
    next: u64,
}

/// The series both the stage (adding) and the loop (taking) hold.
#[derive(Clone, Debug)]
pub struct Series {
    bins: Arc<Mutex<Bins>>,
}

impl Series {
    /// A series of `interval_ns` intervals from `start_ns` (CLOCK_REALTIME).
    pub fn new(interval_ns: u64, start_ns: u64) -> Series {
        Series {
            bins: Arc::new(Mutex::new(Bins {
                interval_ns: interval_ns.max(1),
                start_ns,
                bins: [BTreeMap::new(), BTreeMap::new()],
                next: 0,
            })),
        }
    }

    /// Counts one decision.
    pub fn add(&self, arrival_ns: u64, len_bytes: u32, d: &Decision) {
        let mut b = self.bins.lock().unwrap_or_else(|e| e.into_inner());
        let index = |b: &Bins, t: u64| (t.saturating_sub(b.start_ns) / b.interval_ns).max(b.next);
        let side = d.side.index();
        let at = index(&b, arrival_ns);
        let bin = b.bins[side].entry(at).or_default();
        bin.arrived_packets += 1;
        bin.arrived_bytes += len_bytes as u64;
        bin.queue_max_bytes = bin.queue_max_bytes.max(d.queue_bytes);
        bin.queue_max_packets = bin.queue_max_packets.max(d.queue_packets);
        if d.fate == Fate::Delivered {
            let copies = 1 + d.duplicate as u64;
            let delay_ns = d.release_ns.saturating_sub(arrival_ns);
            let left = index(&b, d.release_ns);
            let bin = b.bins[side].entry(left).or_default();
            bin.delivered_packets += copies;
            bin.delivered_bytes += copies * len_bytes as u64;
            bin.delay_sum_ns += copies * delay_ns;
            bin.delay_max_ns = bin.delay_max_ns.max(delay_ns);
        } else {
            bin.drops += 1;
        }
    }

    /// The intervals ended by `now_ns - SETTLE_NS` (all of them when `last`),
    /// each as (direction index, start s since the series began, bin), in
    /// time order, empty intervals included.
    pub fn take(&self, now_ns: u64, last: bool) -> Vec<(usize, f64, Bin)> {
        let mut b = self.bins.lock().unwrap_or_else(|e| e.into_inner());
        let settled = now_ns.saturating_sub(SETTLE_NS).saturating_sub(b.start_ns) / b.interval_ns;
        let end = if last {
            let last_used = b.bins.iter().filter_map(|m| m.keys().next_back()).max();
            settled.max(last_used.map_or(0, |k| k + 1))
        } else {
            settled
        };
        let mut out = Vec::new();
        for k in b.next..end {
            for side in 0..2 {
                let bin = b.bins[side].remove(&k).unwrap_or_default();
                out.push((side, k as f64 * b.interval_ns as f64 / 1e9, bin));
            }
        }
        b.next = b.next.max(end);
        out
    }

    /// The interval, s.
    pub fn interval_s(&self) -> f64 {
        self.bins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .interval_ns as f64
            / 1e9
    }

    /// The JSON line of one interval of direction `name`.
    pub fn json(name: &str, start_s: f64, interval_s: f64, bin: &Bin) -> serde_json::Value {
        let mean_ms = if bin.delivered_packets > 0 {
            bin.delay_sum_ns as f64 / bin.delivered_packets as f64 / 1e6
        } else {
            0.0
        };
        json!({"series": {
            "direction": name,
            "start_s": start_s,
            "interval_s": interval_s,
            "arrived_packets": bin.arrived_packets,
            "arrived_bps": bin.arrived_bytes as f64 * 8.0 / interval_s,
            "delivered_packets": bin.delivered_packets,
            "throughput_bps": bin.delivered_bytes as f64 * 8.0 / interval_s,
            "delay_mean_ms": mean_ms,
            "delay_max_ms": bin.delay_max_ns as f64 / 1e6,
            "drops": bin.drops,
            "queue_max_bytes": bin.queue_max_bytes,
            "queue_max_packets": bin.queue_max_packets,
        }})
    }
}

impl Tap for Series {
    fn frame(&mut self, _side: Side, _ts_ns: u64, _bytes: &[u8]) {}

    #[inline]
    fn decision(&mut self, arrival_ns: u64, len_bytes: u32, d: &Decision) {
        self.add(arrival_ns, len_bytes, d);
    }

    fn changes(&mut self, _at_ns: u64, _changes: &[Change]) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use linkem_core::model::Model;
    use linkem_core::node::PacketIn;

    /// A 10 Mbit/s link with 5 ms delay fed 1000-byte frames every 0.4 ms
    /// (20 Mbit/s) for 100 ms: every 100 ms interval shows the link's rate
    /// once the queue builds, queue growth, delay growing, and arrivals at 20
    /// Mbit/s; intervals are in order and none is printed before it settles.
    #[test]
    fn intervals_show_rate_delay_and_queue_over_time() {
        let spec = linkem_core::LinkSpec::parse("rate 10mbit delay 5ms").unwrap();
        let mut model = linkem_core::LinkModel::new([spec.link.clone(), spec.link.clone()], 1);
        let start = 1_000_000_000_000u64;
        let series = Series::new(100_000_000, start);
        let mut out = Vec::new();
        for i in 0..250u64 {
            let t = start + i * 400_000;
            let pkt = PacketIn {
                len_bytes: 1000,
                key: linkem_core::rules::FlowKey::default(),
                side: Side::A,
                tag: i,
            };
            model.on_arrival(t, pkt, &mut out);
            for d in out.drain(..) {
                series.add(t, 1000, &d);
            }
        }
        // Nothing before an interval has settled.
        assert!(series.take(start + 100_000_000, false).is_empty());
        let first = series.take(start + 150_000_000, false);
        assert_eq!(first.len(), 2, "{first:?}");
        let (side, start_s, bin) = first[0];
        assert_eq!((side, start_s), (0, 0.0));
        assert_eq!(bin.arrived_packets, 250);
        let bps = Series::json("a->b", start_s, 0.1, &bin)["series"]["throughput_bps"]
            .as_f64()
            .unwrap();
        // The first 5 ms carry nothing (the delay), the rest the link's rate.
        assert!((9.0e6..=10.1e6).contains(&bps), "{bps}");
        assert!(bin.queue_max_bytes > 50_000, "{bin:?}");
        assert!(bin.delay_max_ns > 40_000_000, "{bin:?}");
        assert_eq!(first[1].2, Bin::default());
        let rest = series.take(start + 400_000_000, true);
        let delivered: u64 = first
            .iter()
            .chain(&rest)
            .map(|(_, _, b)| b.delivered_packets + b.drops)
            .sum();
        assert_eq!(delivered, 250);
        let starts: Vec<f64> = rest.iter().step_by(2).map(|r| r.1).collect();
        // 250 frames of 0.8 ms each leave by 205 ms: intervals 1 and 2 remain.
        assert_eq!(starts, [0.1, 0.2]);
    }
}

//! CoDel, Controlled Delay.
//!
//! # Reference
//! RFC 8289 (K. Nichols, V. Jacobson, A. McGregor, J. Iyengar), §5 pseudocode.
//!
//! Synopsis (Dummynet): `codel [target T] [interval T] [ecn|noecn]`;
//! defaults target 5 ms, interval 100 ms, noecn (fq_codel: ecn).
//!
//! At each dequeue at `now`, with sojourn = now − enqueue time of the packet
//! taken from the head:
//! - `ok_to_drop` once the sojourn has stayed ≥ target (and more than one
//!   maximum-size packet is queued) for a whole `interval`
//!   (`first_above_time`);
//! - in the dropping state, while `now ≥ drop_next`: drop the head, `count+1`,
//!   `drop_next ← drop_next + interval/√count` (the control law), leaving the
//!   state as soon as the sojourn falls below target;
//! - entering the dropping state drops one packet, and restarts `count` near
//!   its last value (`count ← count − lastcount` when > 1 and the last
//!   dropping state ended less than 16 intervals ago, else 1).
//!
//! "Maximum-size packet" is the largest packet this queue has held (RFC 8289
//! calls it maxpacket, the MTU). With ECN an ECT packet due for a drop is
//! marked CE and sent instead (the marking counts as the drop in the control
//! law and ends the loop). Times are integer ns; interval/√count is floored
//! to the ns.

use crate::queue::{Fifo, Pkt};

/// CoDel's parameters for one queue (`codel [target T] [interval T]
/// [ecn|noecn]`). Invariant (checked by the parser): `target_ns` <
/// `interval_ns`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CoDelConfig {
    /// The acceptable standing queue delay, ns (RFC 8289 TARGET; default
    /// 5 ms): a sojourn below it never leads to a drop.
    pub target_ns: u64,
    /// The window, ns (RFC 8289 INTERVAL; default 100 ms): the sojourn must
    /// stay ≥ target this long before the first drop, and drops in the
    /// dropping state come `interval/√count` apart.
    pub interval_ns: u64,
    /// An ECT packet due for a drop is marked CE and sent instead (default
    /// off; on for fq_codel's flows).
    pub ecn: bool,
}

impl Default for CoDelConfig {
    fn default() -> Self {
        CoDelConfig {
            target_ns: 5_000_000,
            interval_ns: 100_000_000,
            ecn: false,
        }
    }
}

/// CoDel's state for one queue (RFC 8289's `first_above_time`,
/// `drop_next`, `count`, `lastcount`, `dropping`; all times in ns).
#[derive(Debug, Clone, Default)]
pub struct CoDel {
    first_above_time: u64,
    drop_next: u64,
    count: u32,
    lastcount: u32,
    dropping: bool,
}

/// RFC 8289's control law: the next drop time `t + interval/√count`, in ns
/// (the quotient floored to the ns; `count` 0 is taken as 1). Successive
/// drops thus come closer as `count` grows, so the drop rate rises as √count
/// until the sojourn falls below target.
pub fn control_law(t: u64, interval_ns: u64, count: u32) -> u64 {
    t + (interval_ns as f64 / (count.max(1) as f64).sqrt()) as u64
}

impl CoDel {
    /// The state of a new queue: not dropping, `count` 0, no sojourn above
    /// target seen.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether CoDel is in its dropping state (the sojourn has stayed ≥ target
    /// for an interval and has not yet fallen below it).
    pub fn dropping(&self) -> bool {
        self.dropping
    }

    fn do_dequeue(&mut self, cfg: &CoDelConfig, now: u64, fifo: &mut Fifo) -> (Option<Pkt>, bool) {
        let Some(p) = fifo.pop() else {
            self.first_above_time = 0;
            return (None, false);
        };
        let sojourn = now.saturating_sub(p.enq_ns);
        if sojourn < cfg.target_ns || fifo.bytes <= fifo.max_len as u64 {
            self.first_above_time = 0;
            return (Some(p), false);
        }
        let mut ok = false;
        if self.first_above_time == 0 {
            self.first_above_time = now + cfg.interval_ns;
        } else if now >= self.first_above_time {
            ok = true;
        }
        (Some(p), ok)
    }

    /// Takes the next packet to send from `fifo` at `now`; packets dropped on
    /// the way go to `dropped`. Returns the packet and whether it is to be
    /// marked CE.
    pub fn dequeue(
        &mut self,
        cfg: &CoDelConfig,
        now: u64,
        fifo: &mut Fifo,
        dropped: &mut dyn FnMut(Pkt),
    ) -> Option<(Pkt, bool)> {
        let (mut p, ok) = self.do_dequeue(cfg, now, fifo);
        let Some(mut pkt) = p else {
            self.dropping = false;
            return None;
        };
        let mut mark = false;
        if self.dropping {
            if !ok {
                self.dropping = false;
            }
            while self.dropping && now >= self.drop_next {
                self.count += 1;
                if cfg.ecn && pkt.ect {
                    mark = true;
                    self.drop_next = control_law(self.drop_next, cfg.interval_ns, self.count);
                    break;
                }
                dropped(pkt);
                let (np, ok) = self.do_dequeue(cfg, now, fifo);
                p = np;
                let Some(n) = p else {
                    self.dropping = false;
                    return None;
                };
                pkt = n;
                if !ok {
                    self.dropping = false;
                } else {
                    self.drop_next = control_law(self.drop_next, cfg.interval_ns, self.count);
                }
            }
        } else if ok {
            if cfg.ecn && pkt.ect {
                mark = true;
            } else {
                dropped(pkt);
                let (np, _) = self.do_dequeue(cfg, now, fifo);
                match np {
                    Some(n) => pkt = n,
                    None => {
                        // RFC 8289 enters the dropping state even so.
                        self.enter(cfg, now);
                        return None;
                    }
                }
            }
            self.enter(cfg, now);
        }
        Some((pkt, mark))
    }

    fn enter(&mut self, cfg: &CoDelConfig, now: u64) {
        self.dropping = true;
        let delta = self.count.saturating_sub(self.lastcount);
        self.count = 1;
        // Signed, as in RFC 8289: drop_next may lie ahead of now.
        if delta > 1 && (now as i128 - self.drop_next as i128) < 16 * cfg.interval_ns as i128 {
            self.count = delta;
        }
        self.drop_next = control_law(now, cfg.interval_ns, self.count);
        self.lastcount = self.count;
    }
}

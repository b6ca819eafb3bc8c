//! The per-packet path of a [`Link`]: the steps of the model in the parent's doc, one
//! to one, from arrival to the release time and the draws after the link.

use super::{
    DelayMode, Link, LinkExtra, LinkParams, PacketMeta, Plain, Random, Verdict, SERIALISATION_CACHE,
};
use crate::config::LossAt;
use crate::dist::Distribution;
use crate::fate::Fate;
use crate::trace::TRACE_L2_HEADER_BYTES;

impl Link {
    /// Decides the fate and release time of a packet arriving at `now_ns`.
    #[inline]
    pub fn on_arrival(&mut self, now_ns: u64, meta: PacketMeta) -> Verdict {
        self.arrive(now_ns, meta, LinkExtra::default())
    }

    /// As [`Link::on_arrival`], with extra link time and a loss after the link
    /// decided by the caller (Dummynet's `profile`).
    #[inline]
    pub fn on_arrival_extra(&mut self, now_ns: u64, meta: PacketMeta, extra: LinkExtra) -> Verdict {
        self.arrive(now_ns, meta, extra)
    }

    // The per-packet path: its steps follow the numbered model in the module doc, the
    // early returns of each drop in one place; the link time of a rate
    // ([`Link::serialise`]) and the steps after the link ([`Link::release`]) are
    // apart, inlined back into it.
    #[inline(always)]
    fn arrive(&mut self, now_ns: u64, meta: PacketMeta, extra: LinkExtra) -> Verdict {
        let t_a = now_ns.max(self.last_arrival_ns);
        if self.shaping.as_ref().is_some_and(|s| s.schedule.is_some()) {
            self.run_schedule(t_a);
        }
        self.last_arrival_ns = t_a;
        self.leave_until(t_a);
        let p: &LinkParams = &self.params;
        let mut v = Verdict {
            fate: Fate::Delivered,
            release_ns: t_a,
            duplicate: false,
            corrupt_bit: None,
            queue_packets: self.queue_packets,
            queue_bytes: self.queue_bytes,
        };
        let len = meta.len_bytes;

        if let Some(bucket) = self.shaping.as_mut().and_then(|s| s.policer.as_mut()) {
            if !bucket.admit(t_a, len) {
                return finish(&mut self.plain, v, Fate::Policed);
            }
        }

        let wire_bits = (len as u64 + p.cfg.overhead_bytes as u64) * 8;
        let lost = match &mut self.random {
            Some(r) => r.loss.draw(wire_bits, &mut r.loss_stream),
            None => false,
        };
        if lost && p.cfg.loss_at == LossAt::Arrival {
            return finish(&mut self.plain, v, Fate::Loss);
        }

        if v.queue_packets >= p.limit_packets
            || v.queue_bytes.saturating_add(len as u64) > p.limit_bytes
        {
            return finish(&mut self.plain, v, Fate::QueueFull);
        }

        // The link's own time, and when a rate or a trace queued the packet,
        // the instant it leaves the link.
        let (t_link, queued_left_ns) = match (p.cfg.rate_bps, &p.cfg.trace) {
            (_, Some(trace)) => {
                let ip_bytes = len.saturating_sub(TRACE_L2_HEADER_BYTES);
                let state = self.shaping.as_mut().and_then(|s| s.trace.as_mut());
                let carried = state.and_then(|st| st.carry(trace, t_a, ip_bytes));
                let Some(left_ns) = carried else {
                    // A `trace-once` has ended: the queue never drains again.
                    return finish(&mut self.plain, v, Fate::QueueFull);
                };
                self.clock_ns = left_ns;
                self.clock_rem = 0;
                (left_ns, Some(left_ns))
            }
            (Some(rate), None) => self.serialise(t_a, rate, wire_bits, extra.extra_busy_ns),
            (None, None) => (t_a, None),
        };
        if let Some(left_ns) = queued_left_ns {
            if self.queue_packets > 0 {
                self.older
                    .push_back((self.last_left_ns, self.newest_len_bytes));
            }
            self.queue_packets += 1;
            self.newest_len_bytes = len;
            self.last_left_ns = left_ns;
            self.queue_bytes += len as u64;
        }
        if lost || extra.lose_after_link {
            v.release_ns = t_link;
            return finish(&mut self.plain, v, Fate::Loss);
        }
        self.release(v, t_link, len)
    }

    /// Step 2: the packets that have left the link by `t_a` leave the queue.
    #[inline(always)]
    fn leave_until(&mut self, t_a: u64) {
        if t_a >= self.last_left_ns {
            // Everything queued has left: no need to read the entries.
            self.older.clear();
            self.queue_packets = 0;
            self.queue_bytes = 0;
        } else {
            // The newest (exit `last_left_ns` > t_a) stays; only older ones can leave.
            while let Some(&(left_ns, len)) = self.older.front() {
                if left_ns > t_a {
                    break;
                }
                self.older.pop_front();
                self.queue_packets -= 1;
                self.queue_bytes -= len as u64;
            }
        }
    }

    /// Step 6 with a rate: the link's clock after `wire_bits` at `rate` (less the
    /// burst credit an idle link earned), kept exact as whole ns and a remainder
    /// below `rate`; gives the link time and the instant the packet leaves.
    #[inline(always)]
    fn serialise(
        &mut self,
        t_a: u64,
        rate: u64,
        wire_bits: u64,
        extra_busy_ns: u64,
    ) -> (u64, Option<u64>) {
        let idle = t_a > self.clock_ns;
        if idle {
            if let Some(b) = self.shaping.as_mut().and_then(|s| s.burst.as_mut()) {
                let (limit, credit) = b;
                let idle_ns = t_a - self.clock_ns;
                let earned = (idle_ns as u128 * rate as u128 / 1_000_000_000) as u64;
                *credit = earned.min(*limit);
            }
            self.clock_ns = t_a;
            self.clock_rem = 0;
        }
        let mut bits_on_link = wire_bits;
        if let Some(b) = self.shaping.as_mut().and_then(|s| s.burst.as_mut()) {
            let credit = &mut b.1;
            let used = (*credit).min(wire_bits);
            *credit -= used;
            bits_on_link -= used;
        }
        let slot = match &mut self.plain {
            Some(plain) => {
                &mut plain.serialisation_cache[(bits_on_link as usize / 8) % SERIALISATION_CACHE]
            }
            None => &mut self.serialisation_last,
        };
        if slot.0 != bits_on_link {
            // bits·1e9 ≤ 2^19·1e9 < 2^64.
            let scaled = bits_on_link * 1_000_000_000;
            *slot = (bits_on_link, scaled / rate, scaled % rate);
        }
        let (_, whole_ns, part) = *slot;
        // clock_rem and part are both below rate: their sum carries at most 1 ns.
        let mut rem = self.clock_rem + part;
        let mut ns = whole_ns;
        if rem >= rate {
            rem -= rate;
            ns += 1;
        }
        self.clock_ns = self
            .clock_ns
            .saturating_add(ns)
            .saturating_add(extra_busy_ns);
        self.clock_rem = rem;
        let left_ns = self.clock_ns + (self.clock_rem != 0) as u64;
        (self.clock_ns, Some(left_ns))
    }

    /// Steps 7 and 8 for a packet delivered off the link at `t_link`: its delay,
    /// order, slot, duplicate and corruption.
    #[inline(always)]
    fn release(&mut self, mut v: Verdict, t_link: u64, len: u32) -> Verdict {
        let p: &LinkParams = &self.params;
        let Some(r) = &mut self.random else {
            // No draws: the delay is constant and nothing else happens.
            let release = t_link.saturating_add(p.cfg.delay_ns);
            v.release_ns = if p.cfg.reorder_allow {
                release
            } else {
                let r = release.max(self.last_release_ns);
                self.last_release_ns = r;
                r
            };
            if let Some(plain) = &mut self.plain {
                plain.counts.add(Fate::Delivered);
            }
            return v;
        };
        let reordered = p.cfg.reorder_gap > 0 && {
            if r.reorder_counter + 1 >= p.cfg.reorder_gap && r.reorder.draw(&mut r.reorder_stream) {
                r.reorder_counter = 0;
                true
            } else {
                r.reorder_counter += 1;
                false
            }
        };
        v.release_ns = if reordered {
            t_link
        } else {
            let delay_ns = match p.cfg.jitter_hold_ns {
                Some(hold_ns) => {
                    let hold = t_link / hold_ns;
                    if hold != r.process_hold {
                        r.process_hold = hold;
                        r.process_delay_ns = draw_delay_ns(p, r);
                    }
                    r.process_delay_ns
                }
                None => draw_delay_ns(p, r),
            };
            let release = t_link.saturating_add(delay_ns);
            if p.cfg.reorder_allow {
                release
            } else {
                let r = release.max(self.last_release_ns);
                self.last_release_ns = r;
                r
            }
        };

        if let Some(slot) = &p.cfg.slot {
            v.release_ns = r.slot.gate(slot, v.release_ns, len);
        }
        if !r.duplicate.is_never() && r.duplicate.draw(&mut r.duplicate_stream) {
            v.duplicate = true;
            if let Some(plain) = &mut self.plain {
                plain.counts.duplicated += 1;
            }
        }
        if !r.corrupt.is_never() && r.corrupt.draw(&mut r.corrupt_stream) && len > 0 {
            v.corrupt_bit = Some(r.corrupt_stream.below(len as u64 * 8) as u32);
            if let Some(plain) = &mut self.plain {
                plain.counts.corrupted += 1;
            }
        }
        if let Some(plain) = &mut self.plain {
            plain.counts.add(Fate::Delivered);
        }
        v
    }
}

#[inline]
fn finish(plain: &mut Option<Box<Plain>>, mut v: Verdict, fate: Fate) -> Verdict {
    v.fate = fate;
    if let Some(plain) = plain {
        plain.counts.add(fate);
    }
    v
}

#[inline]
fn draw_delay_ns(p: &LinkParams, r: &mut Random) -> u64 {
    let cfg = &p.cfg;
    match p.delay_mode {
        DelayMode::Constant => return cfg.delay_ns,
        DelayMode::Uniform { lo_ns, span_ns } => {
            let d = lo_ns + r.delay_stream.below(span_ns + 1) as i64;
            return d.max(0) as u64;
        }
        DelayMode::General => {}
    }
    let fresh = r.delay_stream.unit();
    let u = if cfg.delay_correlation > 0.0 {
        let rho = cfg.delay_correlation;
        let u = (1.0 - rho) * fresh + rho * r.delay_last_u;
        r.delay_last_u = u;
        u
    } else {
        fresh
    };
    let z = cfg.distribution.standard(u, &mut r.delay_stream);
    let d = match *cfg.distribution {
        Distribution::Cdf { .. } => cfg.delay_ns as f64 + z,
        _ => cfg.delay_ns as f64 + cfg.jitter_ns as f64 * z,
    };
    if d <= 0.0 {
        0
    } else if d >= u64::MAX as f64 {
        u64::MAX
    } else {
        // Half-up rounding by truncation: `f64::round` is a libm call without SSE4.1.
        (d + 0.5) as u64
    }
}

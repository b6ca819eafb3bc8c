//! Who holds what: each claim ([`Claim`]) in its slot of the [`Table`], the
//! bound on what a claim's pipe may hold ([`PipeAsk`]), and the per-user
//! limits checked against them.

use super::{Limit, CLAIM_FIRST, MAX_CLAIMS, MAX_FRAME_BYTES};
use crate::control::failure::Failure;
use anyhow::Result;
use linkem_core::units::{format_rate_bps, format_time_ns};
use linkem_ctl::Proto;
use std::collections::BTreeMap;

/// What one pipe of a claim asks, for the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipeAsk {
    pub rate_bps: Option<u64>,
    /// The largest delay a packet can get ([`largest_delay_ns`]): what the
    /// `delay` limit bounds.
    pub delay_ns: u64,
    /// Its parts: delay, the jitter's reach, the longest wait for slots.
    pub delay_parts_ns: [u64; 3],
    /// The most it may hold: queue capacity + rate × the largest delay.
    pub held_bytes: u64,
}

/// The smallest frame a queue in packets is counted with (Ethernet's
/// minimum), to bound the slots a queue in bytes may fill.
const MIN_FRAME_BYTES: u64 = 64;

/// The largest delay a packet of `link` can get, and its parts: `delay`;
/// the jitter's reach (`Distribution::reach_ns`: the largest draw of the
/// distribution, whose tail may be long: Pareto reaches ~240 000 × jitter);
/// the longest wait for a `slot` (its largest gap, times the slots a full
/// queue needs when each slot carries a bounded number of packets or bytes).
/// A packet released later than this is impossible, so a bound on it bounds
/// how long the kernel may hold a claim's packets.
pub fn largest_delay_ns(link: &linkem_core::LinkConfig) -> (u64, [u64; 3]) {
    let reach_ns = link.distribution.reach_ns(link.jitter_ns);
    let slot_ns = match &link.slot {
        None => 0,
        Some(slot) => {
            let gap_ns = match &slot.distribution {
                Some((dist, delay_ns, jitter_ns)) => {
                    delay_ns.saturating_add(dist.reach_ns(*jitter_ns))
                }
                None => slot.max_ns.max(slot.min_ns),
            };
            let (queue_packets, queue_bytes) = match (link.queue_packets, link.queue_bytes) {
                (Some(p), _) => (u64::from(p), u64::from(p) * MAX_FRAME_BYTES),
                (None, Some(b)) => (b.div_ceil(MIN_FRAME_BYTES), b),
                (None, None) => (50, 50 * MAX_FRAME_BYTES),
            };
            let by_packets = slot
                .packets
                .map_or(1, |p| queue_packets.div_ceil(u64::from(p.max(1))));
            let by_bytes = slot.bytes.map_or(1, |b| queue_bytes.div_ceil(b.max(1)));
            gap_ns.saturating_mul(by_packets.max(by_bytes).max(1))
        }
    };
    let parts = [link.delay_ns, reach_ns, slot_ns];
    (parts.iter().fold(0u64, |a, &b| a.saturating_add(b)), parts)
}

impl PipeAsk {
    pub fn of(link: &linkem_core::LinkConfig) -> PipeAsk {
        let queue = match (link.queue_bytes, link.queue_packets) {
            (Some(b), _) => b,
            (None, Some(p)) => p as u64 * MAX_FRAME_BYTES,
            // Dummynet's 50 slots.
            (None, None) => 50 * MAX_FRAME_BYTES,
        };
        let (delay_ns, delay_parts_ns) = largest_delay_ns(link);
        let held = match link.rate_bps {
            Some(r) => queue as u128 + r as u128 * delay_ns as u128 / 8_000_000_000,
            None => u128::from(u64::MAX),
        };
        PipeAsk {
            rate_bps: link.rate_bps,
            delay_ns,
            delay_parts_ns,
            held_bytes: held.min(u128::from(u64::MAX)) as u64,
        }
    }
}

/// One claim.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub proto: Proto,
    pub ports: (u16, u16),
    pub uid: u32,
    /// The process that claimed or renewed it last.
    pub pid: i32,
    pub slot: u32,
    /// The words of each direction's pipe (side a, side b).
    pub words: [Vec<String>; 2],
    /// What its two pipes may hold (the limits' `queue`).
    pub held_bytes: u64,
    pub created_ns: u64,
    pub renewed_ns: u64,
    pub expires_ns: u64,
    /// Changes of its pipes since it was made.
    pub changes: u64,
}

/// `udp 5678` or `tcp 8000-8010`.
pub fn ports_text(proto: Proto, (a, b): (u16, u16)) -> String {
    if a == b {
        format!("{} {a}", proto.word())
    } else {
        format!("{} {a}-{b}", proto.word())
    }
}

impl Claim {
    /// Its pipes (and rules): side a's, side b's.
    pub fn numbers(&self) -> [u32; 2] {
        numbers(self.slot)
    }

    pub fn name(&self) -> String {
        ports_text(self.proto, self.ports)
    }

    fn overlaps(&self, proto: Proto, (a, b): (u16, u16)) -> bool {
        self.proto == proto && self.ports.0 <= b && a <= self.ports.1
    }

    fn port_count(&self) -> u64 {
        u64::from(self.ports.1 - self.ports.0) + 1
    }
}

/// The pipe (and rule) numbers of slot `slot`: side a's, side b's.
pub fn numbers(slot: u32) -> [u32; 2] {
    [CLAIM_FIRST + 2 * slot, CLAIM_FIRST + 2 * slot + 1]
}

/// Every claim held, by slot.
#[derive(Debug, Default)]
pub struct Table {
    claims: BTreeMap<u32, Claim>,
}

/// Bytes for messages: `64MiB`, `1.5KiB`.
fn bytes_text(b: u64) -> String {
    if b == u64::MAX {
        return "unbounded".into();
    }
    let mut v = b as f64;
    for unit in ["B", "KiB", "MiB", "GiB", "TiB"] {
        if v < 1024.0 || unit == "TiB" {
            return if unit == "B" {
                format!("{b}B")
            } else {
                format!("{}{unit}", (v * 10.0).round() / 10.0)
            };
        }
        v /= 1024.0;
    }
    unreachable!("the loop returns at TiB")
}

impl Table {
    pub fn len(&self) -> usize {
        self.claims.len()
    }

    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Claim> {
        self.claims.values()
    }

    pub fn get(&self, slot: u32) -> Option<&Claim> {
        self.claims.get(&slot)
    }

    /// Which claim of `uid` a request for `proto ports` names: `Ok(Some)`
    /// the slot of its claim of exactly these ports, `Ok(None)` when no
    /// claim overlaps them; refused when another user's claim overlaps
    /// them (naming its owner), an error when one of the user's own claims
    /// overlaps them without being the same ports.
    pub fn find(&self, uid: u32, proto: Proto, ports: (u16, u16)) -> Result<Option<u32>, Failure> {
        let asked = ports_text(proto, ports);
        let mut mine = None;
        for c in self.claims.values().filter(|c| c.overlaps(proto, ports)) {
            if c.uid != uid {
                return Err(Failure::Refused(format!(
                    "{asked}: {} is claimed by uid {} (until it is released or expires)",
                    c.name(),
                    c.uid
                )));
            }
            if c.ports != ports {
                return Err(Failure::Error(format!(
                    "{asked} overlaps your claim {}: release it first, or name exactly its ports",
                    c.name()
                )));
            }
            mine = Some(c.slot);
        }
        Ok(mine)
    }

    /// The first free slot, or why there is none.
    pub fn free_slot(&self) -> Result<u32, Failure> {
        (0..MAX_CLAIMS)
            .find(|s| !self.claims.contains_key(s))
            .ok_or_else(|| {
                Failure::Refused(format!(
                    "all {MAX_CLAIMS} claims of this emulator are taken"
                ))
            })
    }

    /// Whether `uid` may hold the claim `ports` (in `slot`, if it holds it
    /// already) with pipes asking `asks` under `limit`; the refusal names
    /// the limit, its value and what was asked.
    pub fn check_limits(
        &self,
        uid: u32,
        limit: &Limit,
        held: Option<u32>,
        ports: (u16, u16),
        asks: &[PipeAsk; 2],
    ) -> Result<(), Failure> {
        let refuse = |m: String| {
            let (limit, detail) = m.split_once(": ").unwrap_or((&m, ""));
            Err(Failure::Refused(format!(
                "limit {limit} for uid {uid}: {detail}"
            )))
        };
        let others: Vec<&Claim> = self
            .claims
            .values()
            .filter(|c| c.uid == uid && Some(c.slot) != held)
            .collect();
        if let (None, Some(max)) = (held, limit.claims) {
            if others.len() as u64 >= max {
                return refuse(format!(
                    "claims={max}: it holds {} claims (release one first)",
                    others.len()
                ));
            }
        }
        let ports_asked = u64::from(ports.1 - ports.0) + 1;
        if let Some(max) = limit.ports {
            let held_ports: u64 = others.iter().map(|c| c.port_count()).sum();
            if held_ports + ports_asked > max {
                return refuse(format!(
                    "ports={max}: the claim asks {ports_asked} ports, its other claims hold {held_ports}"
                ));
            }
        }
        for (dir, ask) in ["a-to-b", "b-to-a"].iter().zip(asks) {
            if let Some(max) = limit.rate_bps {
                match ask.rate_bps {
                    Some(r) if r > max => {
                        return refuse(format!(
                            "rate={}: the {dir} pipe asks bw {}",
                            format_rate_bps(max),
                            format_rate_bps(r)
                        ))
                    }
                    Some(_) => {}
                    None => {
                        return refuse(format!(
                            "rate={}: the {dir} pipe has no bw",
                            format_rate_bps(max)
                        ))
                    }
                }
            }
            if let Some(max) = limit.delay_ns {
                if ask.delay_ns > max {
                    let [d, j, slot] = ask.delay_parts_ns;
                    let parts = if j == 0 && slot == 0 {
                        String::new()
                    } else {
                        format!(
                            " at most (delay {} + the jitter's reach {} + slot waits {})",
                            format_time_ns(d),
                            format_time_ns(j),
                            format_time_ns(slot)
                        )
                    };
                    return refuse(format!(
                        "delay={}: the {dir} pipe asks delay {}{parts}",
                        format_time_ns(max),
                        format_time_ns(ask.delay_ns)
                    ));
                }
            }
        }
        if let Some(max) = limit.queue_bytes {
            let this = asks[0].held_bytes.saturating_add(asks[1].held_bytes);
            let rest = others
                .iter()
                .map(|c| c.held_bytes)
                .fold(0u64, u64::saturating_add);
            if this.saturating_add(rest) > max {
                return refuse(format!(
                    "queue={}: the claim's pipes may hold {} (queue + rate × delay), \
                     its other claims {}",
                    bytes_text(max),
                    bytes_text(this),
                    bytes_text(rest)
                ));
            }
        }
        Ok(())
    }

    /// Puts (or replaces) a claim in its slot.
    pub fn put(&mut self, claim: Claim) {
        self.claims.insert(claim.slot, claim);
    }

    pub fn remove(&mut self, slot: u32) -> Option<Claim> {
        self.claims.remove(&slot)
    }

    /// The claims whose time is up at `now_ns`, taken out of the table.
    pub fn take_expired(&mut self, now_ns: u64) -> Vec<Claim> {
        let due: Vec<u32> = self
            .claims
            .values()
            .filter(|c| c.expires_ns <= now_ns)
            .map(|c| c.slot)
            .collect();
        due.into_iter()
            .filter_map(|s| self.claims.remove(&s))
            .collect()
    }

    /// The earliest expiry, if any claim is held.
    pub fn next_expiry_ns(&self) -> Option<u64> {
        self.claims.values().map(|c| c.expires_ns).min()
    }
}

/// What a claim request did, for its reply and the audit log.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimDone {
    pub at_ns: u64,
    /// `claimed`, `changed`, `renewed`, `released`.
    pub what: &'static str,
    pub claim: Claim,
}

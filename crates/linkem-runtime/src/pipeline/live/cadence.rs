//! When a receive port's next frame is due, on sparse traffic that keeps a
//! beat: a ping every 100 ms, a keep-alive, a game tick, a sensor's reports.
//!
//! Why: a frame that finds the live stage asleep costs the wake-up of the
//! stage's core, and on a VM whose idle vCPU halts that is 50-100 µs (this
//! project's VM boots with `haltpoll.guest_halt_poll_ns=0`: a halted vCPU
//! waits for the host to run it). A `delay 50us` then leaves late by what
//! the wake-up took beyond 50 µs, and a ping's round trip through it at
//! 100 ms intervals was 200-252 µs against the bridge's 55-66 plus the
//! 100 µs asked for (docs/numbers.md, "Through a sparse hold awake"). The
//! stage cannot be awake at every instant a frame may come (that is a core
//! spinning while the link is idle), but for traffic with a beat it can be
//! awake at the instants the beat says: it sleeps until shortly before the
//! window below and polls through it ([`super::wait::Linger::expecting`],
//! paid from the spin budget). Traffic without a beat (Poisson, bulk) has
//! no window and costs nothing.
//!
//! The beat is learnt from the kernel's receive stamps of the first frame
//! of each burst (a frame less than [`BURST_NS`] after the one before
//! belongs to its burst), so the stage's own wake-up lateness is not in it,
//! and per flow ([`Beats`]: addresses, protocol and ports, for up to
//! [`FLOWS`] flows of each port), so that two flows with beats of their own
//! (a game's ticks and a keep-alive, two pings) each keep theirs: through
//! one port their arrivals interleave into gaps that keep no beat. A frame
//! less than [`SPARSE_NS`] after the port's previous one is not looked at
//! (its flow is not parsed): traffic that dense has no beat to learn. Senders keep beats in two ways: on a schedule (iputils' ping: a
//! frame sent late is followed by one sent early), or each gap counted from
//! the last send. Either way a beat's gaps are near one period, with now and
//! then one far off it (a stall of the sender: a gap of 108 ms in a 104 ms
//! beat). So the estimate is robust rather than smooth:
//! - the period is the median of the last [`GAPS`] gaps of the beat;
//! - the beat is steady while its last three gaps are within
//!   `period / STEADY_PART` of the period;
//! - the next frame is expected in `[last + k × period − margin, last + k ×
//!   period + margin]` for the first `k` (at most [`MAX_BEATS`]) whose window
//!   is not over, with `margin = max(2 × stray, MIN_MARGIN_NS)`, at most
//!   `period / STEADY_PART`, where the stray is the third largest
//!   `|gap − period|` of the last [`GAPS`] (one stall of a sender on a
//!   schedule, a late frame and then an early one, does not widen it),
//!   doubled once for each frame of the beat that came outside its window
//!   (at most [`MAX_WIDEN`] times) and halved again after [`GAPS`] that
//!   did not: a frame that misses its window costs the window's wake-up
//!   and its own;
//! - on a steady beat, a frame well before its window (an ARP exchange, a
//!   second flow's frame) is not of the beat and is left out, unless
//!   [`MAX_EXTRAS`] such come before the beat's next frame (the beat has
//!   changed: it is learnt again); a gap of two or three periods (beats
//!   lost) counts as that many gaps of its length divided.
//!
//! Invariants: no window before the beat is steady, none for gaps under
//! [`BURST_NS`]; a window is never wider than an eighth of the period; a
//! beat that stops costs at most [`MAX_BEATS`] windows; a flow's frames
//! change no other flow's beat.

/// Frames closer than this to the one before belong to its burst, so a
/// beat is at least this long: at 1 kpps through `delay 50us` windows moved
/// no median (`linkem probe`: 65-75 µs against 70-71) and took 4-5 % of a
/// core; at 100 pps they took the median from 125-164 µs to 81-98.
pub(super) const BURST_NS: u64 = 2_000_000;
/// Gaps of the beat kept.
const GAPS: usize = 8;
/// A gap is of the beat within `period / STEADY_PART` of the period.
const STEADY_PART: u64 = 16;
/// The narrowest half-window: a sender's own timer wakes a few to tens of
/// µs off its beat even when every gap so far was exact.
pub(super) const MIN_MARGIN_NS: u64 = 20_000;
/// Frames off a steady beat, before its next frame, after which it is
/// learnt again.
const MAX_EXTRAS: u32 = 3;
/// Most doublings of the margin after frames that missed their window.
const MAX_WIDEN: u32 = 3;
/// Beats a window is expected after the last frame of the beat.
const MAX_BEATS: u64 = 3;
/// Flows whose beats a port keeps at once ([`Beats`]).
pub(super) const FLOWS: usize = 4;
/// A frame less than this after its port's previous frame is not looked at
/// for a beat (see the module doc): at 10 kpps and more, no frame's flow is
/// parsed for it.
pub(super) const SPARSE_NS: u64 = 100_000;

use linkem_core::rules::{FlowKey, L2Kind};

/// The beat of one flow's arrivals (see the module doc).
#[derive(Debug, Default, Clone)]
pub(super) struct Cadence {
    /// The stamp of the latest frame, of the beat or not.
    last_any_ns: Option<u64>,
    /// The stamp of the beat's latest frame.
    last_ns: Option<u64>,
    /// The beat's last gaps, the latest at `gaps[(next_gap + GAPS - 1) % GAPS]`.
    gaps: [u64; GAPS],
    /// How many of `gaps` hold a gap.
    known: usize,
    next_gap: usize,
    /// Frames off the steady beat since its last frame.
    extras: u32,
    /// The margin is doubled this many times: once per frame of the beat
    /// that missed its window, once less per [`GAPS`] that did not.
    widen: u32,
    /// Frames of the beat in their window since `widen` last changed.
    hits: usize,
    /// The steady period and the margin, derived from the above once per
    /// burst (`window` is asked at every turn of the stage).
    beat: Option<(u64, u64)>,
}

impl Cadence {
    /// A frame stamped `stamp_ns` (the kernel's receive stamp) arrived.
    pub fn arrived(&mut self, stamp_ns: u64) {
        let in_burst = self
            .last_any_ns
            .is_some_and(|t| stamp_ns.saturating_sub(t) < BURST_NS);
        self.last_any_ns = Some(stamp_ns);
        if !in_burst {
            self.burst_began(stamp_ns);
            self.beat = self
                .steady_period()
                .and_then(|p| Some((p, self.margin_ns(p)?)));
        }
    }

    /// A burst's first frame, stamped `stamp_ns`: of the beat or not.
    fn burst_began(&mut self, stamp_ns: u64) {
        let Some(last_ns) = self.last_ns else {
            self.last_ns = Some(stamp_ns);
            return;
        };
        let gap_ns = stamp_ns.saturating_sub(last_ns);
        if let Some((period_ns, margin_ns)) = self.beat {
            let tol_ns = period_ns / STEADY_PART;
            if gap_ns + tol_ns < period_ns {
                self.extras += 1;
                if self.extras >= MAX_EXTRAS {
                    *self = Cadence {
                        last_any_ns: Some(stamp_ns),
                        last_ns: Some(stamp_ns),
                        ..Cadence::default()
                    };
                }
                return;
            }
            let beats = ((gap_ns + period_ns / 2) / period_ns).clamp(1, MAX_BEATS);
            self.widen_on(gap_ns.abs_diff(beats * period_ns) > margin_ns);
            if (2..=MAX_BEATS).contains(&beats) && gap_ns.abs_diff(beats * period_ns) <= tol_ns {
                for _ in 0..beats {
                    self.push(gap_ns / beats);
                }
                self.last_ns = Some(stamp_ns);
                self.extras = 0;
                return;
            }
        }
        self.push(gap_ns);
        self.last_ns = Some(stamp_ns);
        self.extras = 0;
    }

    fn widen_on(&mut self, missed: bool) {
        if missed {
            self.widen = (self.widen + 1).min(MAX_WIDEN);
            self.hits = 0;
        } else {
            self.hits += 1;
            if self.hits >= GAPS {
                self.widen = self.widen.saturating_sub(1);
                self.hits = 0;
            }
        }
    }

    fn push(&mut self, gap_ns: u64) {
        self.gaps[self.next_gap] = gap_ns;
        self.next_gap = (self.next_gap + 1) % GAPS;
        self.known = (self.known + 1).min(GAPS);
    }

    /// The last `n` gaps, the latest first.
    fn latest(&self, n: usize) -> impl Iterator<Item = u64> + '_ {
        (1..=n.min(self.known)).map(move |k| self.gaps[(self.next_gap + GAPS - k) % GAPS])
    }

    /// The median of the known gaps.
    fn period_ns(&self) -> u64 {
        let mut sorted = self.gaps;
        let known = &mut sorted[..self.known];
        known.sort_unstable();
        known.get(self.known / 2).copied().unwrap_or(0)
    }

    /// The period, while the last three gaps are near it.
    fn steady_period(&self) -> Option<u64> {
        if self.known < 3 {
            return None;
        }
        let period_ns = self.period_ns();
        let steady = self
            .latest(3)
            .all(|g| g.abs_diff(period_ns) <= period_ns / STEADY_PART);
        (steady && period_ns >= BURST_NS).then_some(period_ns)
    }

    /// Half the window around the next beat (see the module doc); None
    /// before three gaps are known.
    fn margin_ns(&self, period_ns: u64) -> Option<u64> {
        if self.known < 3 {
            return None;
        }
        let mut strays: [u64; GAPS] = [0; GAPS];
        for (s, g) in strays.iter_mut().zip(self.latest(GAPS)) {
            *s = g.abs_diff(period_ns);
        }
        strays.sort_unstable_by(|a, b| b.cmp(a));
        Some(((2 * strays[2]).max(MIN_MARGIN_NS) << self.widen).min(period_ns / STEADY_PART))
    }

    /// Where the next frame is expected, the first window not over at
    /// `now_ns`: `(from_ns, until_ns)`, or None while the arrivals keep no
    /// steady beat (or it stopped).
    pub fn window(&self, now_ns: u64) -> Option<(u64, u64)> {
        let (period_ns, margin_ns) = self.beat?;
        let last_ns = self.last_ns?;
        (1..=MAX_BEATS)
            .map(|k| last_ns + k * period_ns)
            .find(|next_ns| next_ns + margin_ns > now_ns)
            .map(|next_ns| (next_ns - margin_ns, next_ns + margin_ns))
    }
}

/// The beats of one receive port's flows (see the module doc): a flow is a
/// hash of its addresses, protocol and ports ([`flow_of`]).
#[derive(Debug, Default, Clone)]
pub(super) struct Beats {
    flows: [FlowBeat; FLOWS],
}

#[derive(Debug, Default, Clone)]
struct FlowBeat {
    flow: u64,
    /// The stamp of the flow's latest frame; 0: the slot is free.
    seen_ns: u64,
    cadence: Cadence,
}

impl Beats {
    /// A frame of `flow` stamped `stamp_ns` arrived. A flow not kept takes
    /// a free slot, else the one whose beat expects nothing (or, all of
    /// them expecting a frame, the one seen longest ago), learnt anew.
    pub fn arrived(&mut self, flow: u64, stamp_ns: u64) {
        let i = match self
            .flows
            .iter()
            .position(|f| f.seen_ns != 0 && f.flow == flow)
        {
            Some(i) => i,
            None => {
                let (i, _) = self
                    .flows
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, f)| {
                        let expecting = f.seen_ns != 0 && f.cadence.window(stamp_ns).is_some();
                        (expecting, f.seen_ns)
                    })
                    .expect("FLOWS > 0");
                self.flows[i] = FlowBeat {
                    flow,
                    ..FlowBeat::default()
                };
                i
            }
        };
        let f = &mut self.flows[i];
        f.seen_ns = stamp_ns.max(1);
        f.cadence.arrived(stamp_ns);
    }

    /// The earliest-starting window of the port's flows not over at
    /// `now_ns` ([`Cadence::window`]).
    pub fn window(&self, now_ns: u64) -> Option<(u64, u64)> {
        self.flows
            .iter()
            .filter(|f| f.seen_ns != 0)
            .filter_map(|f| f.cadence.window(now_ns))
            .min_by_key(|w| w.0)
    }
}

/// The flow of an Ethernet frame for its beat: a hash of its EtherType, IP
/// protocol, addresses and ports (ICMP's type and code, and an echo's
/// identifier); the rest of the header (lengths, TTL, flags) changes from
/// frame to frame of one flow.
pub(super) fn flow_of(frame: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let k = FlowKey::parse(frame, L2Kind::Ethernet);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let echo = matches!(k.proto, 1 | 58).then(|| echo_id(frame)).flatten();
    (
        k.ether_type,
        k.proto,
        k.src_ip,
        k.dst_ip,
        k.src_port,
        k.dst_port,
        echo,
    )
        .hash(&mut h);
    h.finish()
}

/// The identifier of an ICMP or ICMPv6 echo request or reply: each ping
/// keeps its own (Linux: its socket's port), so two pings between the same
/// two hosts, each on its own beat, are two flows.
fn echo_id(frame: &[u8]) -> Option<u16> {
    use etherparse::{Icmpv4Type, Icmpv6Type, SlicedPacket, TransportSlice};
    match SlicedPacket::from_ethernet(frame).ok()?.transport? {
        TransportSlice::Icmpv4(icmp) => match icmp.icmp_type() {
            Icmpv4Type::EchoRequest(e) | Icmpv4Type::EchoReply(e) => Some(e.id),
            _ => None,
        },
        TransportSlice::Icmpv6(icmp) => match icmp.icmp_type() {
            Icmpv6Type::EchoRequest(e) | Icmpv6Type::EchoReply(e) => Some(e.id),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const US: u64 = 1_000;

    fn beat(c: &mut Cadence, stamps: impl IntoIterator<Item = u64>) {
        for t in stamps {
            c.arrived(t);
        }
    }

    #[test]
    fn a_beat_is_expected_after_three_gaps_of_it() {
        let mut c = Cadence::default();
        for k in 0..3 {
            c.arrived(k * 100 * MS);
            assert_eq!(c.window(k * 100 * MS), None, "after {k} gaps");
        }
        c.arrived(300 * MS);
        assert_eq!(
            c.window(300 * MS),
            Some((400 * MS - MIN_MARGIN_NS, 400 * MS + MIN_MARGIN_NS))
        );
        // Past that window, the next beat's; none after the third beat lost.
        assert_eq!(
            c.window(400 * MS + MIN_MARGIN_NS).unwrap().0,
            500 * MS - MIN_MARGIN_NS
        );
        assert_eq!(c.window(600 * MS + MIN_MARGIN_NS), None);
    }

    #[test]
    fn the_window_is_as_wide_as_the_strays_and_widens_after_a_miss() {
        // A 10 ms beat whose frames come up to 50 us off it.
        let offsets = [0i64, 30, -20, 50, -40, 10, 0, -50, 20, 40];
        let at = |k: usize, off: i64| (k as u64 * 10 * MS).saturating_add_signed(off * 1_000);
        let mut c = Cadence::default();
        // While it learns, frames outside narrow windows widen them; after
        // 40 beats it has narrowed to what the strays need.
        beat(&mut c, (0..40).map(|k| at(k, offsets[k % 10])));
        let (from, until) = c.window(390 * MS).unwrap();
        // The last frame came 40 us late: the next is expected 10 ms after it.
        let next = 400 * MS + 40 * US;
        assert!(
            from <= next - 100 * US && until >= next + 100 * US,
            "{from}..{until}"
        );
        assert!(until - from <= 2 * 300 * US, "{from}..{until}");
        let narrow = until - from;
        // A stall: one frame 600 us late (the next on time), outside the
        // window: it widens, and narrows again after frames in it.
        c.arrived(at(40, 600));
        c.arrived(at(41, 0));
        let (from, until) = c.window(410 * MS).unwrap();
        assert!(until - from >= 2 * narrow, "{from}..{until} after a miss");
        for k in 42..80 {
            c.arrived(at(k, offsets[k % 10]));
        }
        let (from, until) = c.window(790 * MS).unwrap();
        assert!(
            until - from <= narrow,
            "{from}..{until} long after the miss"
        );
    }

    #[test]
    fn bursts_count_once_and_frames_off_the_beat_are_left_out() {
        let mut c = Cadence::default();
        // Each beat a burst of 10 frames 20 us apart.
        beat(
            &mut c,
            (0..5u64).flat_map(|k| (0..10).map(move |i| k * 20 * MS + i * 20 * US)),
        );
        assert_eq!(c.window(80 * MS).unwrap().0, 100 * MS - MIN_MARGIN_NS);
        // An ARP frame between beats changes nothing.
        c.arrived(87 * MS);
        assert_eq!(c.window(87 * MS).unwrap().0, 100 * MS - MIN_MARGIN_NS);
        // A lost beat: the frame 40 ms after the last counts as two gaps.
        c.arrived(120 * MS);
        assert_eq!(c.window(120 * MS).unwrap().0, 140 * MS - MIN_MARGIN_NS);
        // Three frames off the beat (a new beat of 5 ms): it is learnt again.
        beat(&mut c, [125 * MS, 130 * MS, 135 * MS]);
        assert_eq!(c.window(135 * MS), None);
        beat(&mut c, [140 * MS, 145 * MS]);
        assert_eq!(c.window(145 * MS), None);
        c.arrived(150 * MS);
        assert_eq!(c.window(150 * MS).unwrap().0, 155 * MS - MIN_MARGIN_NS);
    }

    /// Two flows through one port, at 20 and 30 ms: their arrivals
    /// interleave into gaps of 5, 10 and 15 ms that keep no beat, and each
    /// flow keeps its own; a third flow's frames, without a beat, change
    /// neither, and a fifth flow takes the slot of a flow that stopped.
    #[test]
    fn each_flow_keeps_its_beat() {
        let (a, b, chatter) = (1u64, 2u64, 3u64);
        let mut arrivals: Vec<(u64, u64)> = (0..30u64)
            .map(|k| (a, k * 20 * MS))
            .chain((0..20u64).map(|k| (b, 5 * MS + k * 30 * MS)))
            .chain([(chatter, 57 * MS), (chatter, 211 * MS), (chatter, 404 * MS)])
            .collect();
        arrivals.sort_by_key(|&(_, t)| t);
        let mut port = Cadence::default();
        let mut beats = Beats::default();
        for &(flow, t) in &arrivals {
            port.arrived(t);
            beats.arrived(flow, t);
        }
        let now = 585 * MS;
        assert_eq!(port.window(now), None, "one beat for the port");
        // a's next frame at 600 ms, b's at 605 ms.
        assert_eq!(beats.window(now).unwrap().0, 600 * MS - MIN_MARGIN_NS);
        assert_eq!(
            beats.window(600 * MS + MIN_MARGIN_NS).unwrap().0,
            605 * MS - MIN_MARGIN_NS
        );
        // a stops; b goes on; new flows come one by one. They take the free
        // slot, the chatter's and then each other's while a's beat still
        // expects a frame; once it expects none, a's slot too. b's stays.
        for (k, t) in [(10u64, 601 * MS), (11, 602 * MS), (12, 603 * MS)] {
            beats.arrived(k, t);
        }
        beats.arrived(b, 605 * MS);
        beats.arrived(13, 690 * MS);
        let w = beats.window(690 * MS).unwrap();
        assert_eq!(w.0, 695 * MS - MIN_MARGIN_NS, "b's beat kept: {w:?}");
    }

    fn echo4(id: u16, seq: u16, ttl: u8) -> Vec<u8> {
        let b = etherparse::PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], ttl)
            .icmpv4_echo_request(id, seq);
        let mut f = Vec::new();
        b.write(&mut f, &[7; 56]).expect("a frame");
        f
    }

    fn echo6(id: u16, seq: u16) -> Vec<u8> {
        let b = etherparse::PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv6([1; 16], [2; 16], 64)
            .icmpv6_echo_request(id, seq);
        let mut f = Vec::new();
        b.write(&mut f, &[7; 56]).expect("a frame");
        f
    }

    #[test]
    fn two_pings_between_the_same_hosts_are_two_flows() {
        assert_eq!(flow_of(&echo4(7, 1, 64)), flow_of(&echo4(7, 2, 63)));
        assert_ne!(flow_of(&echo4(7, 1, 64)), flow_of(&echo4(8, 1, 64)));
        assert_eq!(flow_of(&echo6(7, 1)), flow_of(&echo6(7, 9)));
        assert_ne!(flow_of(&echo6(7, 1)), flow_of(&echo6(8, 1)));
        // A frame cut short within its ICMP header is still some flow.
        let f = echo4(7, 1, 64);
        let _ = flow_of(&f[..14 + 20 + 3]);
    }

    #[test]
    fn arrivals_without_a_beat_have_no_window() {
        // A steady stream of 1 kpps is one burst.
        let mut c = Cadence::default();
        for k in 0..1_000 {
            c.arrived(k * MS);
            assert_eq!(c.window(k * MS), None);
        }
        // Pseudo-random gaps of 2-50 ms: three in a row near each other
        // now and then make a beat by chance, for under 1 % of arrivals.
        let mut c = Cadence::default();
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut t = 0;
        let mut windows = 0;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t += BURST_NS + x % (48 * MS);
            c.arrived(t);
            windows += usize::from(c.window(t).is_some());
        }
        assert!(windows < 100, "{windows} windows for random gaps");
    }
}

//! One direction of an emulated link.
//!
//! # Model (normative; a checker outside this repository compares replay output
//! with it packet by packet)
//! For packet i arriving at t_A (ns) with frame length `len` bytes:
//! 1. **Arrival.** Arrival times never go backwards: an earlier stamp is taken as
//!    the previous arrival.
//! 2. **Queue occupancy** is the set of accepted earlier packets j whose link exit
//!    t_L(j) > t_A (one that exits exactly at t_A has left). Recorded in the verdict.
//! 3. **Policer** (`policer R burst B`): tokens in bytes accrue at R up to B, the
//!    bucket starts full; if `len` exceeds the tokens the packet is `policed`,
//!    otherwise `len` tokens are taken.
//! 4. **Loss** is drawn (see [`crate::loss`]). With `loss-at arrival` (default) a
//!    lost packet ends here as `loss`.
//! 5. **Queue limit:** `queue-full` if occupancy ≥ the packet limit, or occupancy
//!    bytes + `len` > the byte limit.
//! 6. **Link:** with `rate R`, t_L = max(t_L(last accepted), t_A) + (len +
//!    overhead)·8 / R, kept exact as a fraction so that back-to-back packets never
//!    drift; reported floored to the ns. With `trace FILE`, t_L is the delivery
//!    opportunity T_k ([`crate::trace`]) that carries the packet's last byte of
//!    b = max(len − 14, 1) IP bytes: with (g, r) the opportunity that carried the
//!    previous accepted packet's last byte and the bytes it has left, the packet
//!    takes min(b, r) bytes of g if T_g > t_A, then n = ⌈b'/1504⌉ whole
//!    opportunities from k_0 = max(g + 1, min{k : T_k > t_A}) for the b' bytes
//!    left: t_L = T_{k_0+n−1}. A `trace-once` that runs out drops the packet, and
//!    every later one, as `queue-full`. Without a rate or trace, t_L = t_A. A
//!    packet lost with `loss-at link` ends here as `loss` after taking its link
//!    time.
//! 7. **Delay:** release = ⌊t_L⌋ + d_i, d_i drawn per packet ([`crate::dist`]). By
//!    default releases never go backwards: release = max(release, previous
//!    release) (TLEM's rule), so jitter does not reorder. `reorder allow` drops that
//!    rule. With netem's `reorder P gap N`, after N-1 delayed packets the next one
//!    is, with probability P, released at ⌊t_L⌋ without delay, overtaking.
//!    With `jitter-mode process HOLD` the delay is a process in time rather than
//!    a draw per packet: d(t) = v_⌊t/HOLD⌋, one value drawn (as above) for each
//!    hold of HOLD ns that a packet's ⌊t_L⌋ falls in, and the same rule of
//!    order. A rise of d never reorders; after a fall by Δ the rule holds
//!    releases at the old level for Δ ns (d falls with slope -1), whatever the
//!    packet rate. So the time-average of the delays is the configured
//!    distribution except on those falls, a fraction E[(v_n − v_{n+1})⁺]/HOLD
//!    of the time (J/3 / HOLD for the uniform; 0.33 % at the default HOLD =
//!    100·J); for a symmetric distribution the mean stays exact.
//!    netem's `slot` then gates the release T: packets leave only in slots. A
//!    packet with T after the next slot's instant S opens a new one, S = T + s
//!    (s drawn uniform in [MIN, MAX), or DELAY + JITTER·z from D); it leaves
//!    at S; a slot carries packets until `packets N` or `bytes M` are used (the
//!    one that uses the last still leaves), then the next opens at S + s. The
//!    first slot is open at 0. (netem also redraws whenever its queue is polled,
//!    which ties its slots to unrelated arrivals; linkem draws only as above.)
//! 8. **Duplicate** and **corrupt** are drawn for delivered packets: a duplicate
//!    is a second copy released right after the original; corruption flips one
//!    uniformly chosen bit of the original frame.
//!
//! Each step with randomness uses its own stream ([`crate::rng`]).

use crate::config::schedule::Schedule;
use crate::config::{LinkConfig, SlotConfig};
use crate::dist::Distribution;
use crate::fate::{Fate, FateCounts};
use crate::loss::{CorrelatedChance, LossConfig, LossState};
use crate::rng::{Stream, StreamId};
use crate::trace::{Trace, OPPORTUNITY_BYTES};
use std::collections::VecDeque;
use std::sync::Arc;

mod arrive;

/// What the model needs to know about a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketMeta {
    /// Frame length in bytes as on the wire without overhead (pcap's `orig_len`).
    pub len_bytes: u32,
}

/// The model's decision for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Verdict {
    /// Delivered, or why it was dropped.
    pub fate: Fate,
    /// For `delivered`: when the packet leaves the emulator. For a drop: when the
    /// drop happened (the arrival, or the link exit for `loss-at link`).
    pub release_ns: u64,
    /// A second copy leaves right after this one.
    pub duplicate: bool,
    /// Flip this bit (bit 0 = most significant bit of byte 0) of the frame.
    pub corrupt_bit: Option<u32>,
    /// Packets in the queue when this one arrived.
    pub queue_packets: u32,
    /// Frame bytes in the queue when this one arrived.
    pub queue_bytes: u64,
}

/// Per-packet additions to the link time that the rules layer makes for
/// Dummynet's `profile` (extra airtime, and a loss that strikes after the link).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkExtra {
    /// Added to the packet's time on the link (it keeps the link busy).
    pub extra_busy_ns: u64,
    /// The packet uses the link, then is lost (as `loss-at link`).
    pub lose_after_link: bool,
}

/// Token bucket kept in exact integer units of bit·ns/s ("nanobits"): a byte is
/// 8e9 units and a rate of R bit/s adds R units per ns, so no rounding ever
/// accumulates.
#[derive(Debug, Clone)]
struct TokenBucket {
    rate_bps: u64,
    capacity: u64,
    tokens: u64,
    last_ns: u64,
}

impl TokenBucket {
    fn new(rate_bps: u64, burst_bytes: u64, now_ns: u64) -> Self {
        let capacity = burst_bytes * 8_000_000_000;
        TokenBucket {
            rate_bps,
            capacity,
            tokens: capacity,
            last_ns: now_ns,
        }
    }

    fn admit(&mut self, now_ns: u64, len_bytes: u32) -> bool {
        let elapsed = now_ns - self.last_ns;
        self.last_ns = now_ns;
        self.tokens = self
            .tokens
            .saturating_add(elapsed.saturating_mul(self.rate_bps))
            .min(self.capacity);
        let cost = len_bytes as u64 * 8_000_000_000;
        if cost <= self.tokens {
            self.tokens -= cost;
            true
        } else {
            false
        }
    }
}

const SERIALISATION_CACHE: usize = 64;

/// How delays are drawn, decided once per configuration so that the common
/// cases skip the general floating-point path.
#[derive(Debug, Clone, Copy)]
enum DelayMode {
    Constant,
    /// Uncorrelated uniform jitter: an integer draw in [lo, lo + span], clamped at 0.
    Uniform {
        lo_ns: i64,
        span_ns: u64,
    },
    /// Any distribution or correlation: inverse CDF in floating point.
    General,
}

/// What a configuration fixes for every packet, computed once. Shared (by
/// `Arc`) between the instances of a dynamic pipe, which run the same
/// configuration: an instance then holds only its own running state, and the
/// constants every packet reads stay in cache however many instances there are.
#[derive(Debug)]
pub(crate) struct LinkParams {
    cfg: LinkConfig,
    limit_packets: u32,
    limit_bytes: u64,
    delay_mode: DelayMode,
    /// Some step draws random numbers or runs a chain (loss, jitter, reorder,
    /// duplicate, corrupt): the link needs its [`Random`] state.
    random: bool,
}

impl LinkParams {
    pub(crate) fn new(cfg: LinkConfig) -> Arc<Self> {
        let delay_mode = if cfg.jitter_ns == 0 && cfg.distribution.uses_jitter() {
            DelayMode::Constant
        } else if *cfg.distribution == Distribution::Uniform && cfg.delay_correlation == 0.0 {
            DelayMode::Uniform {
                lo_ns: cfg.delay_ns as i64 - cfg.jitter_ns as i64,
                span_ns: 2 * cfg.jitter_ns,
            }
        } else {
            DelayMode::General
        };
        let random = cfg.loss != LossConfig::None
            || !matches!(delay_mode, DelayMode::Constant)
            || cfg.reorder_gap > 0
            || cfg.slot.is_some()
            || !CorrelatedChance::new(cfg.duplicate, cfg.duplicate_correlation).is_never()
            || !CorrelatedChance::new(cfg.corrupt, cfg.corrupt_correlation).is_never();
        Arc::new(LinkParams {
            limit_packets: cfg.queue_packets.unwrap_or(u32::MAX),
            limit_bytes: cfg.queue_bytes.unwrap_or(u64::MAX),
            delay_mode,
            random,
            cfg,
        })
    }
}

/// The random streams and the state of every chain driven by them. Made the
/// first time the configuration needs it (usually at creation) and kept from
/// then on. Made late it equals the state an eagerly made one would have: a
/// stream is a pure function of (seed, direction, impairment) until its first
/// draw, and no chain moves without a draw.
#[derive(Debug, Clone)]
struct Random {
    loss: LossState,
    loss_stream: Stream,
    delay_last_u: f64,
    delay_stream: Stream,
    /// `jitter-mode process`: the hold (t / HOLD) the current value was drawn
    /// for, and that value.
    process_hold: u64,
    process_delay_ns: u64,
    reorder_counter: u32,
    reorder: CorrelatedChance,
    reorder_stream: Stream,
    duplicate: CorrelatedChance,
    duplicate_stream: Stream,
    corrupt: CorrelatedChance,
    corrupt_stream: Stream,
    slot: SlotState,
}

/// netem's `slot`: when the next slot opens and what the open one has left.
#[derive(Debug, Clone)]
struct SlotState {
    stream: Stream,
    next_ns: u64,
    packets_left: u32,
    bytes_left: u64,
}

impl SlotState {
    fn refill(&mut self, cfg: &SlotConfig, from_ns: u64) {
        let gap_ns = match &cfg.distribution {
            Some((dist, delay_ns, jitter_ns)) => {
                let z = dist.standard(self.stream.unit(), &mut self.stream);
                let d = match **dist {
                    Distribution::Cdf { .. } => *delay_ns as f64 + z,
                    _ => *delay_ns as f64 + *jitter_ns as f64 * z,
                };
                // Half-up rounding by truncation; a negative time is 0 (netem adds it to now).
                if d <= 0.0 {
                    0
                } else {
                    (d + 0.5).min(u64::MAX as f64) as u64
                }
            }
            // netem: min + ⌊r·(max − min)/2^32⌋, uniform in [min, max).
            None if cfg.max_ns > cfg.min_ns => {
                cfg.min_ns + self.stream.below(cfg.max_ns - cfg.min_ns)
            }
            None => cfg.min_ns,
        };
        self.next_ns = from_ns.saturating_add(gap_ns);
        self.packets_left = cfg.packets.unwrap_or(u32::MAX);
        self.bytes_left = cfg.bytes.unwrap_or(u64::MAX);
    }

    /// When a packet due at `due_ns` leaves: a packet that finds the last slot
    /// passed opens the next one a slot time after it is due; one slot carries
    /// packets until its count or bytes run out, then the next opens a slot
    /// time after it.
    fn gate(&mut self, cfg: &SlotConfig, due_ns: u64, len_bytes: u32) -> u64 {
        if self.next_ns < due_ns {
            self.refill(cfg, due_ns);
        }
        let send_ns = self.next_ns;
        self.packets_left = self.packets_left.saturating_sub(1);
        self.bytes_left = self.bytes_left.saturating_sub(u64::from(len_bytes));
        if self.packets_left == 0 || self.bytes_left == 0 {
            self.refill(cfg, send_ns);
        }
        send_ns
    }
}

impl Random {
    fn new(seed: u64, direction: u64, cfg: &LinkConfig) -> Self {
        let mut delay_stream = Stream::new(seed, direction, StreamId::Delay);
        // netem starts its correlated uniform from a random value, not from 0.
        let delay_last_u = delay_stream.unit();
        Random {
            loss: LossState::new(&cfg.loss),
            loss_stream: Stream::new(seed, direction, StreamId::Loss),
            delay_last_u,
            delay_stream,
            process_hold: u64::MAX,
            process_delay_ns: 0,
            reorder_counter: 0,
            reorder: CorrelatedChance::new(cfg.reorder_probability, cfg.reorder_correlation),
            reorder_stream: Stream::new(seed, direction, StreamId::Reorder),
            duplicate: CorrelatedChance::new(cfg.duplicate, cfg.duplicate_correlation),
            duplicate_stream: Stream::new(seed, direction, StreamId::Duplicate),
            corrupt: CorrelatedChance::new(cfg.corrupt, cfg.corrupt_correlation),
            corrupt_stream: Stream::new(seed, direction, StreamId::Corrupt),
            // netem opens a slot when it is configured; a link starts at 0.
            slot: SlotState {
                stream: Stream::new(seed, direction, StreamId::Slot),
                next_ns: 0,
                packets_left: cfg
                    .slot
                    .as_ref()
                    .and_then(|s| s.packets)
                    .unwrap_or(u32::MAX),
                bytes_left: cfg.slot.as_ref().and_then(|s| s.bytes).unwrap_or(u64::MAX),
            },
        }
    }

    /// New parameters; the chains keep their state (see [`Link::reconfigure`]).
    fn reconfigure(&mut self, cfg: &LinkConfig) {
        self.loss.reconfigure(&cfg.loss);
        let keep = |old: &CorrelatedChance, p: f64, c: f64| {
            let mut n = CorrelatedChance::new(p, c);
            n.carry_state_from(old);
            n
        };
        self.reorder = keep(
            &self.reorder,
            cfg.reorder_probability,
            cfg.reorder_correlation,
        );
        self.duplicate = keep(&self.duplicate, cfg.duplicate, cfg.duplicate_correlation);
        self.corrupt = keep(&self.corrupt, cfg.corrupt, cfg.corrupt_correlation);
    }
}

/// The policer's bucket, Dummynet's `burst` in bits, (limit, credit) (see
/// [`Link::set_burst`]), and a trace's progress: one pointer for the three
/// keeps a pipe instance's link at 160 bytes.
#[derive(Debug, Clone, Default)]
struct Shaping {
    policer: Option<TokenBucket>,
    burst: Option<(u64, u64)>,
    trace: Option<TraceState>,
    schedule: Option<ScheduleState>,
}

impl Shaping {
    fn boxed(
        policer: Option<TokenBucket>,
        burst: Option<(u64, u64)>,
        trace: Option<TraceState>,
        schedule: Option<ScheduleState>,
    ) -> Option<Box<Shaping>> {
        (policer.is_some() || burst.is_some() || trace.is_some() || schedule.is_some()).then(|| {
            Box::new(Shaping {
                policer,
                burst,
                trace,
                schedule,
            })
        })
    }
}

/// Where a link running a schedule stands. Public so that what watches a
/// running link (the control side's marks) follows its steps by this very
/// rule rather than a copy of it.
#[derive(Debug, Clone)]
pub struct ScheduleState {
    schedule: Arc<Schedule>,
    /// The schedule's start: the link's start ([`Link::start_at`]), else the
    /// first arrival, or the change that set it.
    origin_ns: Option<u64>,
    /// The next change to apply, and the loops done.
    next: usize,
    cycle: u64,
}

impl ScheduleState {
    /// At the schedule's first step; `origin_ns` None: set by the first
    /// [`ScheduleState::due`].
    pub fn new(schedule: Arc<Schedule>, origin_ns: Option<u64>) -> Self {
        ScheduleState {
            schedule,
            origin_ns,
            next: 0,
            cycle: 0,
        }
    }

    /// The schedule it follows.
    pub fn schedule(&self) -> &Arc<Schedule> {
        &self.schedule
    }

    /// The step last given by [`ScheduleState::due`] (a loop keeps its last
    /// step until its next first); None before the first.
    pub fn current(&self) -> Option<&Arc<LinkConfig>> {
        let changes = &self.schedule.changes;
        match self.next {
            0 if self.cycle > 0 => changes.last(),
            0 => None,
            n => changes.get(n - 1),
        }
        .map(|(_, cfg)| cfg)
    }

    /// The next change due at or before `now_ns`, with its instant, moving past it.
    pub fn due(&mut self, now_ns: u64) -> Option<(u64, Arc<LinkConfig>)> {
        let origin = *self.origin_ns.get_or_insert(now_ns);
        let changes = &self.schedule.changes;
        if self.next == changes.len() {
            let period = self.schedule.period_ns?;
            self.next = 0;
            self.cycle += 1;
            // Whole loops that ended before now change nothing that stays:
            // start from the last loop begun by now.
            let begun = (now_ns.saturating_sub(origin)) / period;
            self.cycle = self.cycle.max(begun.saturating_sub(1));
        }
        let (at_ns, cfg) = &changes[self.next];
        let period = self.schedule.period_ns.unwrap_or(0);
        let instant = origin
            .saturating_add(self.cycle.saturating_mul(period))
            .saturating_add(*at_ns);
        if instant > now_ns {
            return None;
        }
        self.next += 1;
        Some((instant, cfg.clone()))
    }
}

/// Where a link running a trace stands (step 6 of the model).
#[derive(Debug, Clone, Default)]
struct TraceState {
    /// The trace's origin: the link's start ([`Link::start_at`]), else the
    /// first arrival, or the instant a change put the trace on a running link.
    t0_ns: Option<u64>,
    /// No opportunity at or before this instant serves a packet: the exit of
    /// the last packet sent at a rate before a change put the trace on.
    floor_ns: u64,
    /// Some packet has been carried: `last_k` and the rest are meaningful.
    started: bool,
    /// The opportunity that carried the last byte of the last packet, its
    /// instant, and the bytes it has left.
    last_k: u64,
    last_ns: u64,
    left_bytes: u32,
    /// A `trace-once` ran out while a packet still needed bytes: as in
    /// mahimahi that packet holds the link for ever, so nothing more leaves.
    ended: bool,
}

impl TraceState {
    /// The instant the link delivers the last byte of a packet of `bytes`
    /// (IP bytes) arriving at `t_a`: the packet uses what is left of the
    /// opportunity that carried the previous packet's last byte if that one
    /// lies strictly after `t_a`, then whole opportunities after it and
    /// strictly after `t_a`. `None`: a `trace-once` ends first, now or for
    /// an earlier packet.
    fn carry(&mut self, trace: &Trace, t_a: u64, bytes: u32) -> Option<u64> {
        if self.ended {
            return None;
        }
        let t0 = *self.t0_ns.get_or_insert(t_a);
        let mut need = bytes.max(1);
        let k = if self.started && self.last_ns > t_a && self.left_bytes > 0 {
            if need <= self.left_bytes {
                self.left_bytes -= need;
                return Some(self.last_ns);
            }
            need -= self.left_bytes;
            self.last_k + 1
        } else {
            let ready = t_a.max(self.floor_ns);
            let first = if ready < t0 {
                0
            } else {
                trace.first_after(ready - t0).unwrap_or(u64::MAX)
            };
            if self.started {
                first.max(self.last_k + 1)
            } else {
                first
            }
        };
        let n = need.div_ceil(OPPORTUNITY_BYTES);
        let last_k = k.saturating_add(u64::from(n) - 1);
        let Some(at_ns) = trace
            .opportunity_ns(last_k)
            .and_then(|rel| t0.checked_add(rel))
        else {
            self.ended = true;
            return None;
        };
        self.started = true;
        self.last_k = last_k;
        self.last_ns = at_ns;
        self.left_bytes = n * OPPORTUNITY_BYTES - need;
        Some(at_ns)
    }
}

/// What a plain link keeps and the instances of a pipe do without.
#[derive(Debug, Clone)]
struct Plain {
    /// Counts by fate (an instance counts in [`crate::pipe::Instance`]).
    counts: FateCounts,
    /// The serialisation memo for 64 sizes, for a link that carries mixed
    /// traffic (an instance has `Link::serialisation_last` only, 1.5 KB less).
    serialisation_cache: [(u64, u64, u64); SERIALISATION_CACHE],
}

/// One direction's link state. Feed packets in arrival order to
/// [`Link::on_arrival`]; change parameters with [`Link::reconfigure`].
///
/// Laid out for many instances (one per flow of a dynamic pipe): the fields
/// every packet touches come first and together (`repr(C)` keeps the order:
/// 48 bytes of clocks, then 96 bytes of pointers, queue and serialisation
/// memo, 160 bytes in all); the configuration is shared (`LinkParams`); the
/// random streams and chains, the policer, the burst credit, the counts and
/// the 64-entry serialisation table live behind pointers that are empty when
/// not in use.
#[derive(Debug, Clone)]
#[repr(C)]
pub struct Link {
    last_arrival_ns: u64,
    /// Exit time of the newest queued packet (the largest: exits never go
    /// backwards), so that a queue that has fully left is emptied without
    /// reading it.
    last_left_ns: u64,
    queue_bytes: u64,
    /// Link clock: the exit time of the last accepted packet is
    /// `clock_ns + clock_rem / rate_bps` ns, with `clock_rem < rate_bps`.
    clock_ns: u64,
    clock_rem: u64,
    last_release_ns: u64,
    params: Arc<LinkParams>,
    random: Option<Box<Random>>,
    /// The policer and the burst credit, both rare, behind one pointer.
    shaping: Option<Box<Shaping>>,
    /// Counts and the 64-entry serialisation table of a plain link (see
    /// [`Plain`]); `None` for the instances of a pipe.
    plain: Option<Box<Plain>>,
    /// Accepted packets still in the queue except the newest: (first ns at
    /// which it has left, frame bytes). The newest is (`last_left_ns`,
    /// `newest_len_bytes`), kept inline so that a queue of at most one packet,
    /// the usual state of a light flow's instance, never reads or writes the
    /// ring (one cache miss per packet saved when many instances are active).
    older: VecDeque<(u64, u32)>,
    /// Packets in the queue, the newest included.
    queue_packets: u32,
    /// Frame bytes of the newest queued packet (meaningful when
    /// `queue_packets > 0`).
    newest_len_bytes: u32,
    /// The serialisation time of the last wire size, as (bits, whole ns,
    /// remainder in units of 1/rate ns): a 64-bit division costs more than the
    /// rest of a packet's model, and a flow repeats its sizes.
    serialisation_last: (u64, u64, u64),
    seed: u64,
    direction: u64,
}

impl Link {
    /// A link starting idle at time 0. `direction` separates the random streams of
    /// the two directions of one bridge (0 and 1).
    pub fn new(cfg: LinkConfig, seed: u64, direction: u64) -> Self {
        let mut link = Link::with_params(LinkParams::new(cfg), seed, direction);
        link.plain = Some(Box::new(Plain {
            counts: FateCounts::default(),
            serialisation_cache: [(u64::MAX, 0, 0); SERIALISATION_CACHE],
        }));
        link
    }

    /// A link running shared parameters, without the 64-entry serialisation
    /// table and without counts (one instance of a dynamic pipe). Decides
    /// exactly as [`Link::new`] with the same configuration.
    pub(crate) fn with_params(params: Arc<LinkParams>, seed: u64, direction: u64) -> Self {
        let mut link = Link {
            last_arrival_ns: 0,
            last_left_ns: 0,
            queue_bytes: 0,
            clock_ns: 0,
            clock_rem: 0,
            last_release_ns: 0,
            params: params.clone(),
            random: None,
            shaping: None,
            plain: None,
            older: VecDeque::new(),
            queue_packets: 0,
            newest_len_bytes: 0,
            serialisation_last: (u64::MAX, 0, 0),
            seed,
            direction,
        };
        link.apply(params, 0, true);
        link
    }

    /// Starts the clocks of the link's trace and schedule at `t0_ns`, the
    /// instant a live link started (and a recording of it stores), instead
    /// of at the first arrival; what a change has started already keeps its
    /// own origin. Called before any arrival; a later call changes nothing.
    pub fn start_at(&mut self, t0_ns: u64) {
        if let Some(s) = self.shaping.as_mut() {
            if let Some(t) = s.trace.as_mut() {
                t.t0_ns.get_or_insert(t0_ns);
            }
            if let Some(sc) = s.schedule.as_mut() {
                sc.origin_ns.get_or_insert(t0_ns);
            }
        }
    }

    /// The link's current configuration.
    pub fn config(&self) -> &LinkConfig {
        &self.params.cfg
    }

    /// Whether the link is a pass-through now ([`LinkConfig::is_pass_through`])
    /// and has nothing running that a later packet could meet: no schedule
    /// (a step is taken only when a packet arrives), trace or policer state.
    pub fn passes_through(&self) -> bool {
        self.params.cfg.is_pass_through() && self.shaping.is_none()
    }

    /// Counts of every verdict given so far (all zero for an instance of a
    /// dynamic pipe, which counts in [`crate::pipe::Instance`]).
    pub fn counts(&self) -> &FateCounts {
        self.plain.as_ref().map_or(&FateCounts::ZERO, |p| &p.counts)
    }

    /// The link clock: the last accepted packet's exit floored to the ns, and
    /// whether the exact exit lies after it (a fraction of a ns later). A
    /// scheduler serves its next packet at the floor (`on_arrival` there keeps
    /// the fraction, so back-to-back service stays exact).
    pub fn clock_ns(&self) -> (u64, bool) {
        (self.clock_ns, self.clock_rem != 0)
    }

    /// Packets accepted and not yet exited from the link at the last arrival.
    pub fn queued_packets(&self) -> usize {
        self.queue_packets as usize
    }

    /// Changes the link's parameters from `now_ns` on. Packets already decided keep
    /// their release times (nothing queued is lost); the link clock, the queue, the
    /// loss model's state (when the model is the same) and the random streams
    /// carry over, so a run with changes replays exactly.
    pub fn reconfigure(&mut self, now_ns: u64, cfg: LinkConfig) {
        self.apply(LinkParams::new(cfg), now_ns, false);
    }

    /// [`Link::reconfigure`] with parameters shared by a pipe's instances.
    pub(crate) fn reconfigure_params(&mut self, now_ns: u64, params: Arc<LinkParams>) {
        self.apply(params, now_ns, false);
    }

    /// Applies every change of the link's schedule due by `now_ns`, each at
    /// its own instant.
    #[cold]
    fn run_schedule(&mut self, now_ns: u64) {
        while let Some((at_ns, cfg)) = self
            .shaping
            .as_mut()
            .and_then(|s| s.schedule.as_mut())
            .and_then(|s| s.due(now_ns))
        {
            let kept = self.shaping.as_mut().and_then(|s| s.schedule.take());
            self.apply(LinkParams::new((*cfg).clone()), at_ns, false);
            let old = self.shaping.take().map(|s| *s).unwrap_or_default();
            self.shaping = Shaping::boxed(old.policer, old.burst, old.trace, kept);
        }
    }

    fn apply(&mut self, params: Arc<LinkParams>, now_ns: u64, fresh: bool) {
        let cfg = &params.cfg;
        if !fresh && cfg.rate_bps != self.params.cfg.rate_bps && self.clock_rem != 0 {
            // The fraction is in units of the old rate; round the clock up to the ns
            // so that no packet leaves before its predecessor finished.
            self.clock_ns += 1;
            self.clock_rem = 0;
        }
        if let Some(plain) = &mut self.plain {
            plain.serialisation_cache.fill((u64::MAX, 0, 0));
        }
        self.serialisation_last = (u64::MAX, 0, 0);
        let old = self.shaping.take().map(|s| *s).unwrap_or_default();
        let policer = cfg.policer.map(|p| match &old.policer {
            Some(old) if !fresh => {
                let mut b = TokenBucket::new(p.rate_bps, p.burst_bytes, old.last_ns);
                b.tokens = old.tokens.min(b.capacity);
                b
            }
            _ => TokenBucket::new(p.rate_bps, p.burst_bytes, now_ns),
        });
        let trace = cfg.trace.as_ref().map(|t| match old.trace {
            // The same trace goes on from where it stands.
            Some(state) if self.params.cfg.trace.as_deref() == Some(&**t) => state,
            Some(_) | None if fresh => TraceState::default(),
            // A new trace starts at the change, after what the link carries.
            _ => TraceState {
                t0_ns: Some(now_ns),
                floor_ns: self.clock_ns + (self.clock_rem != 0) as u64,
                ..TraceState::default()
            },
        });
        let schedule = cfg.schedule.as_ref().map(|sched| match old.schedule {
            // The same schedule goes on from where it stands.
            Some(state) if state.schedule == *sched => state,
            _ => ScheduleState::new(sched.clone(), (!fresh).then_some(now_ns)),
        });
        self.shaping = Shaping::boxed(policer, old.burst, trace, schedule);
        match &mut self.random {
            Some(r) => r.reconfigure(cfg),
            None if params.random => {
                self.random = Some(Box::new(Random::new(self.seed, self.direction, cfg)))
            }
            None => {}
        }
        self.params = params;
    }

    /// Dummynet's `burst SIZE` (only with a rate): when a packet finds the link
    /// idle, the credit becomes min(SIZE·8, rate · idle time) bits, idle time
    /// counted from the exit of the last packet; while credit lasts, bits cross the
    /// link at line speed (no serialisation time), and a packet larger than the
    /// credit takes (bits − credit)/rate. Credit left when the link goes idle again
    /// is not kept (Dummynet recomputes it from the idle time).
    pub fn set_burst(&mut self, burst_bytes: u64) {
        let old = self.shaping.take().map(|s| *s).unwrap_or_default();
        let burst = (burst_bytes > 0).then(|| (burst_bytes.saturating_mul(8), 0));
        self.shaping = Shaping::boxed(old.policer, burst, old.trace, old.schedule);
    }
}

/// Bytes of a link's random streams and chains, held only by a link whose
/// configuration draws random numbers.
pub(crate) fn random_state_bytes() -> usize {
    std::mem::size_of::<Random>()
}

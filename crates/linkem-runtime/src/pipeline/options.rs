//! What a direction is started with, and the counts it reports.

use super::wait::DEFAULT_SPIN_NS;
use hdrhistogram::Histogram;
use linkem_core::{Fate, FateCounts, LinkConfig};

/// Frames taken per receive call: amortises the per-call cost while keeping one
/// batch's worth of arrivals (at 0.5 Mpps, 64 µs) short.
pub const DEFAULT_BATCH: usize = 32;

/// Default for [`DirectionOptions::max_lag_ns`]: 5 ms.
///
/// A real link never delivers a packet long after its time, so the emulator
/// must not either: what the machine cannot send within this bound of its
/// release time is dropped and counted (`late`), and the input stage stops
/// admitting packets while the output stage is that far behind (counted
/// `backpressure`), so no hidden queue builds up under overload. The bound is
/// above the scheduling delays an ordinary (non-real-time) input thread sees on
/// a loaded machine (time slices of 1.5-3 ms; the default `--realtime out`
/// leaves the input stage ordinary), so that a busy but not overloaded machine
/// does not turn jitter into loss, and far below the hundreds of milliseconds
/// of backlog an unbounded line showed under overload. TLEM drops at 100 µs on
/// dedicated cores; on such a machine pass a smaller `--max-lag`.
pub const DEFAULT_MAX_LAG_NS: u64 = 5_000_000;

/// What one direction is started with ([`super::Direction::start`]): the
/// link to emulate and how its two stages run. [`DirectionOptions::new`] fills
/// in the defaults; the `linkem bridge` options override them.
#[derive(Debug, Clone)]
pub struct DirectionOptions {
    /// For messages: "a->b".
    pub name: String,
    /// The link the input stage's model emulates; replaced while running by
    /// [`super::Direction::reconfigure`].
    pub link: LinkConfig,
    /// The user's seed: with `direction`, it fixes every random draw of the
    /// model, so a run can be compared with a replay of the same seed.
    pub seed: u64,
    /// 0 or 1: separates the random streams of the two directions.
    pub direction: u64,
    /// Requested size of the delay line (rounded up to 2 MiB): it must hold
    /// everything in flight, or arrivals are dropped as `backpressure`. The
    /// default is [`buffer_bytes_for`] the link.
    pub buffer_bytes: usize,
    /// The most the output stage spins before a release time, ns (default
    /// [`super::DEFAULT_SPIN_NS`]); it spins only as long as its sleeps have
    /// lately overshot, so this bounds CPU spent for precision.
    pub spin_ns: u64,
    /// Drop a packet that cannot be sent within this many ns of its release
    /// time (`None`: never; default [`DEFAULT_MAX_LAG_NS`]).
    pub max_lag_ns: Option<u64>,
    /// Frames taken per receive call (default [`DEFAULT_BATCH`]); at least 1.
    pub batch: usize,
    /// Run the stages under SCHED_FIFO at this priority while they wait (the
    /// output stage for release times, the input stage for frames) and through
    /// short bursts; a stage continuously busy for a millisecond returns to
    /// ordinary scheduling until it next waits (see `wait::Realtime`). A woken
    /// real-time thread preempts ordinary ones at once; without it, on a busy
    /// machine (traffic generators on the same cores) a wake-up waits for its
    /// turn, a millisecond or more, which is what every packet's lateness then
    /// shows (the output stage's directly; the input stage's whenever the delay
    /// is shorter than that wait).
    pub realtime_priority: Option<i32>,
    /// The input stage stays under SCHED_FIFO even when busy (a dedicated machine).
    pub realtime_input: bool,
}

impl DirectionOptions {
    /// Options with the defaults: a line sized for `link` at 10 Gbit/s when
    /// it has no rate, [`DEFAULT_SPIN_NS`], [`DEFAULT_MAX_LAG_NS`],
    /// [`DEFAULT_BATCH`], ordinary scheduling.
    pub fn new(name: &str, link: LinkConfig, seed: u64, direction: u64) -> Self {
        let buffer_bytes = buffer_bytes_for(&link, None);
        DirectionOptions {
            name: name.to_string(),
            link,
            seed,
            direction,
            buffer_bytes,
            spin_ns: DEFAULT_SPIN_NS,
            max_lag_ns: Some(DEFAULT_MAX_LAG_NS),
            batch: DEFAULT_BATCH,
            realtime_priority: None,
            realtime_input: false,
        }
    }
}

/// Rate assumed for sizing the delay line when the link has no `rate`: the
/// fastest this emulator is expected to carry on one direction.
pub const UNSHAPED_SIZING_RATE_BPS: u64 = 10_000_000_000;

/// Bytes the delay line needs to hold everything in flight: the packets in the
/// link queue plus rate × (delay + 4 jitters + 1 ms), doubled because a
/// minimum-size frame takes 128 bytes in the line but 84 on the wire.
///
/// Without `rate` there is no queue, and whatever the line holds beyond the
/// delay is backlog of an output stage that cannot keep up: that is kept small
/// (1 ms at 10 Gbit/s plus 4 MiB of slack), so that overload shows as counted
/// drops within milliseconds rather than as seconds of lateness on every packet.
pub fn buffer_bytes_for(link: &LinkConfig, line_rate_bps: Option<u64>) -> usize {
    let rate = link
        .rate_bps
        .or(line_rate_bps)
        .unwrap_or(UNSHAPED_SIZING_RATE_BPS) as u128;
    let hold_ns = link.delay_ns as u128 + 4 * link.jitter_ns as u128 + 1_000_000;
    let in_flight = rate * hold_ns / 8_000_000_000 * 2;
    let queue = match (link.rate_bps, link.queue_packets, link.queue_bytes) {
        (None, _, _) => 0,
        (Some(_), _, Some(b)) => b as u128 * 2,
        (Some(_), Some(p), None) => p as u128 * 9216,
        (Some(_), None, None) => 64 << 20,
    };
    (in_flight + queue + SLACK_BYTES).min(usize::MAX as u128 / 2) as usize
}

/// Room beyond what the link holds: bursts a little ahead of the model, and
/// a few jumbo frames.
const SLACK_BYTES: u128 = 4 << 20;

/// Counts of one direction, consistent at one instant.
///
/// Every frame taken from the receive port ends in exactly one fate: a
/// super-frame cut into N wire frames adds N − 1 to `segmented`, and each wire
/// frame gets its own fate, so
/// `received + segmented = delivered + every drop + in flight` (see
/// [`DirectionStats::adds_up`]). Frames the kernel dropped before linkem could
/// take them are never `received`; they are counted in `rx_kernel_drops`.
#[derive(Debug, Clone)]
pub struct DirectionStats {
    /// The direction's name, as in [`DirectionOptions::name`].
    pub name: String,
    /// Fates by the model, with `delivered` meaning handed to the kernel for
    /// sending (and not refused by it), and `backpressure`, `late`, `too-big`
    /// and `tx-error` filled in by the pipeline.
    pub fates: FateCounts,
    /// Frames taken from the receive port.
    pub received: u64,
    /// Bytes of the wire frames given to the model (a super-frame's wire
    /// frames as cut, each with its headers: the bytes the link's rate
    /// charges); frames never given to it (`too-big`) are not counted.
    pub received_bytes: u64,
    /// Extra wire frames made by cutting super-frames (TSO/GSO/GRO).
    pub segmented: u64,
    /// Frames the kernel dropped on receive before linkem could take them.
    pub rx_kernel_drops: u64,
    /// Packets accepted and not yet sent or dropped as late.
    pub in_flight: u64,
    /// Extra copies sent by `duplicate`.
    pub copies_sent: u64,
    /// Of the delivered frames, those that left merged into super-frames
    /// (coalescing on transmit); not a fate, each is `delivered` too.
    pub coalesced: u64,
    /// Super-frames sent (each of 2 to 64 wire frames).
    pub super_frames: u64,
    /// Of `coalesced`, the wire frames that crossed inside a received
    /// super-frame stored whole, never cut (every one of its wire frames
    /// got the same plain decision, see the `live` module doc).
    pub whole: u64,
    /// Of the delivered frames, the wire frames the kernel forwarded itself
    /// while the link was a pass-through (the kernel path, `--kernel-path`);
    /// not a fate, each is `delivered` too. They have no lateness or delay
    /// sample: they left at the instant they came.
    pub kernel_forwarded: u64,
    /// Lateness of sent packets (send time − release time), ns.
    pub lateness: Histogram<u64>,
    /// Bytes of the wire frames handed to the kernel for sending (each with
    /// its headers, also inside a super-frame sent whole); frames the kernel
    /// refuses later (`tx-error`, rare) are not taken back out.
    pub delivered_bytes: u64,
    /// The model's delay of the packets stored for sending (release −
    /// arrival), ns, at the bounds of `lateness`: what left was that late on
    /// top. Empty for a plain forwarder.
    pub delay: Histogram<u64>,
    /// Times the input (or node) stage woke from waiting for frames: with
    /// `received`, shows whether it slept between frames or found batches.
    pub rx_wakeups: u64,
    /// Of `rx_wakeups`' stage, the times frames came while it was awake for
    /// them: the beat of a port's arrivals (a ping, a keep-alive) said when,
    /// and the frame cost no wake-up of its own (`--spin-budget`).
    pub rx_on_beat: u64,
    /// Of `rx_wakeups`' stage, the yields (while it lingered, held a frame
    /// or was awake for a beat) after which its core came back 0.5 ms or
    /// more later: a stall of the machine, or a busy task beside linkem (a
    /// build at idle priority) that kept the core until the tick. Two within
    /// 2 s pause that lingering for 0.1 to 10 s (renewed while more tasks
    /// are ready to run than there are cores), so frames then cost their
    /// own wake-up, not a tick.
    pub rx_yields_lost: u64,
    /// Times the output stage woke from a sleep before a release time or
    /// from parking on an empty line; wake-ups per packet near 1 mean every
    /// packet cost a sleep.
    pub tx_wakeups: u64,
    /// How the output thread waits for releases: its spin budget, what it
    /// spun and what it learnt of the machine's wake-ups (a thread serving
    /// several directions reports the same in each).
    pub spin: super::SpinStats,
    /// Whether the delay line sits on reserved huge pages
    /// ([`crate::delay_line::Producer::uses_huge_pages`]).
    pub huge_pages: bool,
    /// Actual size of the delay line, bytes (the request rounded up).
    pub buffer_bytes: u64,
}

impl DirectionStats {
    /// A direction named `name` that counted nothing yet, its histograms
    /// empty with the pipeline's bounds: what a test or a reader builds its
    /// own counts on (`..DirectionStats::empty(name)`).
    pub fn empty(name: &str) -> DirectionStats {
        DirectionStats {
            name: name.to_string(),
            fates: FateCounts::default(),
            received: 0,
            received_bytes: 0,
            segmented: 0,
            rx_kernel_drops: 0,
            in_flight: 0,
            copies_sent: 0,
            coalesced: 0,
            super_frames: 0,
            whole: 0,
            kernel_forwarded: 0,
            lateness: lateness_histogram(),
            delivered_bytes: 0,
            delay: lateness_histogram(),
            rx_wakeups: 0,
            rx_on_beat: 0,
            rx_yields_lost: 0,
            tx_wakeups: 0,
            spin: super::SpinStats::default(),
            huge_pages: false,
            buffer_bytes: 0,
        }
    }

    /// received + segmented = delivered + every drop + in flight.
    pub fn adds_up(&self) -> bool {
        self.received + self.segmented == self.fates.arrived() + self.in_flight
    }

    /// Frames handed to the kernel for sending and not refused.
    pub fn delivered(&self) -> u64 {
        self.fates.get(Fate::Delivered)
    }
}

pub(super) fn lateness_histogram() -> Histogram<u64> {
    // 1 ns to 100 s at 2 significant digits (values within 1 %): 4k counters,
    // small enough to merge in a few microseconds.
    Histogram::new_with_bounds(1, 100_000_000_000, 2).expect("constant bounds are valid")
}

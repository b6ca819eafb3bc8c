//! The live emulator: one stage owning the model for both directions, and an
//! output stage per direction, joined by a delay line each (TLEM's pipeline,
//! TLEM §III; DEMU's rx/worker/tx split, DEMU §2.2).
//!
//! ```text
//!            live thread (both directions)                       delay line             output thread
//!  IF_A ─rx─▶ timestamp ─▶ cut to wire frames ─▶ Model ─▶ [release|frame]… a->b ─▶ wait until release ─tx─▶ IF_B
//!  IF_B ─rx─▶ (kernel     (GSO/GRO, checksum)   fate +   [release|frame]… b->a ─▶ wait until release ─tx─▶ IF_A
//!             stamp)        too big: counted    release     (SPSC)               sleep far, spin near
//!                                               drop: counted  no room or output   later than max-lag: late
//!                                                              behind: backpressure
//! ```
//!
//! The model (the plain link, [`linkem_core::LinkModel`], or a node of rules,
//! [`linkem_core::node::Node`]) runs on the live thread only ([`live`]); the
//! output threads only wait and send. Neither blocks the other: the only
//! shared state is the delay lines' counters, flags and a waker (an eventfd
//! and a timer the live stage arms, `waker`) for waking an idle output
//! thread, the release time each output stage has caught up to (so
//! the live stage sheds load when one is more than max-lag behind), and the
//! statistics, which the live stage publishes under a lock once per batch, the
//! output stages every 50 ms when they have time to spare.
//!
//! Threads: a bridge of one pair ([`LiveBridge::start`]) has three, the live
//! stage and an output stage per direction. A bridge of several pairs
//! ([`LiveBridge::start_group`], `linkem bridge --pair`) has three whatever
//! the number of pairs: one live stage that takes a batch of every pair in
//! turn (each pair keeps its own model, delay lines, counts and change queue;
//! one poll over every pair's sockets when idle), one output stage for every
//! pair's a->b direction and one for every b->a (`output_group`: each
//! direction in its own release order, a frame stored for any of them wakes a
//! parked stage). Idle, all of them sleep without a timeout: the live stage
//! in its poll until a frame, a change or the stop (an eventfd), or the next
//! sweep of idle flow instances while a rules model holds some; an output
//! stage with nothing queued until a frame is stored for it or the stop (or,
//! once, to publish counts it has not published yet); the delay lines' pager
//! until a tail moves into what it made resident (`delay_line`).
//!
//! Counting (invariant checked by [`DirectionStats::adds_up`]): every frame
//! taken from a receive port ends in exactly one fate, counted once; a
//! super-frame cut into N wire frames adds N − 1 to `segmented`:
//!
//! ```text
//! received + segmented = delivered + queue-full + loss + policed + backpressure
//!                        + late + too-big + tx-error + flushed + node drops + in flight
//! ```
//!
//! `delivered` means handed to the kernel for sending: frames the kernel later
//! refuses ([`TxPort::tx_errors`]) move to `tx-error`. Wire frames that left
//! merged into a super-frame (`coalesce`) are delivered one by one all the
//! same; `coalesced` counts them apart (it is not a fate), and `whole` those
//! of them that crossed inside a received super-frame stored whole (`live`).
//!
//! Modules: `options` (what a direction starts with, what it reports), `live`
//! (the one stage of the model), `wire` (cutting super-frames, finishing
//! checksums), `output` (the output stage), `output_group` (one output stage
//! for a direction of several pairs), `coalesce` (merging wire frames into
//! super-frames on transmit, for both output stages), `wait` (sleeping,
//! spinning and real-time policy), `forward` (the plain-forwarder baseline),
//! `objects` (per pipe and queue counts).

mod coalesce;
mod forward;
mod live;
mod objects;
mod options;
mod output;
mod output_group;
mod wait;
mod wake;
mod waker;
mod wire;

pub use coalesce::DEFAULT_WINDOW_NS as DEFAULT_COALESCE_WINDOW_NS;
pub use live::{
    GroupPair, LiveBridge, LiveGroup, LiveModel, LiveOptions, NodeBridge, SubmitError, Submitted,
    Tap, MAX_PENDING_CHANGES,
};
pub use objects::{DelayHistogram, ObjectStats, ObjectsSnapshot, DELAY_BUCKETS_NS};
pub use options::{
    buffer_bytes_for, DirectionOptions, DirectionStats, DEFAULT_BATCH, DEFAULT_MAX_LAG_NS,
    UNSHAPED_SIZING_RATE_BPS,
};
pub use wait::{set_realtime, DEFAULT_LINGER_NS, DEFAULT_SPIN_NS};
pub use wake::{SpinStats, DEFAULT_SPIN_BUDGET_PPM};

use crate::port::{RxPort, TxPort};
use hdrhistogram::Histogram;
use linkem_core::{Fate, FateCounts};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

struct InputShared {
    counts: FateCounts,
    received: u64,
    received_bytes: u64,
    segmented: u64,
    accepted: u64,
    rx_wakeups: u64,
    rx_on_beat: u64,
    rx_yields_lost: u64,
    kernel_drops: u64,
    /// The model's delays of what was stored (the live stage records each
    /// batch's here when it publishes its counts).
    delay: Histogram<u64>,
}

impl Default for InputShared {
    fn default() -> Self {
        InputShared {
            counts: FateCounts::default(),
            received: 0,
            received_bytes: 0,
            segmented: 0,
            accepted: 0,
            rx_wakeups: 0,
            rx_on_beat: 0,
            rx_yields_lost: 0,
            kernel_drops: 0,
            delay: options::lateness_histogram(),
        }
    }
}

struct OutputShared {
    sent: u64,
    /// Bytes of the wire frames counted in `sent`.
    sent_bytes: u64,
    copies_sent: u64,
    late: u64,
    too_big: u64,
    tx_errors: u64,
    lateness: Histogram<u64>,
    tx_wakeups: u64,
    /// The output thread's waiting ([`SpinStats`]).
    spin: SpinStats,
    /// Frames of a flushed group not sent ([`FlushSet`]).
    flushed: u64,
    /// Wire frames sent inside super-frames, and the super-frames.
    coalesced: u64,
    super_frames: u64,
    /// Of `coalesced`, those in super-frames stored whole.
    whole: u64,
}

impl OutputShared {
    /// Packets the output stage has done with: sent, late, too big or flushed
    /// (the stored packets less these are in flight).
    fn done(&self) -> u64 {
        self.sent + self.late + self.too_big + self.flushed
    }
}

/// Groups (the live stage's pipes) whose packets still in the delay line
/// are not sent but counted as `flushed`: the packets of a deleted pipe.
#[derive(Default)]
pub(crate) struct FlushSet {
    any: AtomicBool,
    groups: Mutex<std::collections::HashSet<u32>>,
    /// Groups added so far: an output stage that ends a flushed group's
    /// records at once (host mode) looks again when it changes.
    added: AtomicU64,
}

impl FlushSet {
    pub(crate) fn add(&self, group: u32) {
        self.groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(group);
        self.any.store(true, Ordering::Release);
        self.added.fetch_add(1, Ordering::Release);
    }

    /// How many groups were added so far.
    pub(crate) fn added(&self) -> u64 {
        self.added.load(Ordering::Acquire)
    }

    /// Whether a record of `group` is to be flushed; group 0 never is, and
    /// nothing is looked up before the first flush.
    #[inline]
    pub(crate) fn contains(&self, group: u32) -> bool {
        group != 0
            && self.any.load(Ordering::Acquire)
            && self
                .groups
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&group)
    }
}

/// Records of each bounded group (pipe) in one direction's delay line, when
/// the send port asks ([`crate::port::TxPort::max_held_per_pipe`]: host mode,
/// whose kernel holds every stored packet in a netfilter queue of 65 536, for
/// the claims' pipes): the live stage gives a bounded pipe a group with
/// [`BOUNDED_GROUP`] set, takes a slot before it stores a record of it and
/// counts a record it may not store as backpressure; the output stage gives
/// the slot back when it takes the record (sent, late, flushed). Counters are
/// shared by bounded groups equal modulo [`HELD_COUNTERS`] (a group's bound
/// then counts its neighbours' records too: never more held, at worst fewer).
pub(crate) struct HeldPerGroup {
    bound: Option<crate::port::HeldBound>,
    counts: Box<[std::sync::atomic::AtomicU32]>,
}

/// Counters of [`HeldPerGroup`].
const HELD_COUNTERS: usize = 4096;
/// The bit of a group number that marks a bounded pipe's group.
pub(crate) const BOUNDED_GROUP: u32 = (crate::delay_line::MAX_GROUP >> 1) + 1;

impl HeldPerGroup {
    /// `None`: no bound, nothing counted.
    pub(crate) fn new(bound: Option<crate::port::HeldBound>) -> Self {
        let counts = match bound {
            None => Box::new([]) as Box<[_]>,
            Some(_) => (0..HELD_COUNTERS)
                .map(|_| std::sync::atomic::AtomicU32::new(0))
                .collect(),
        };
        HeldPerGroup { bound, counts }
    }

    /// Whether pipe `pipe`'s records are bounded.
    pub(crate) fn bounds(&self, pipe: u32) -> bool {
        self.bound.as_ref().is_some_and(|b| b.pipes.contains(&pipe))
    }

    fn counter(&self, group: u32) -> Option<&std::sync::atomic::AtomicU32> {
        if group & BOUNDED_GROUP == 0 {
            return None;
        }
        self.counts
            .get((group & !BOUNDED_GROUP) as usize % HELD_COUNTERS)
    }

    /// Takes a slot for a record of `group`; false when the group holds its limit.
    #[inline]
    pub(crate) fn take(&self, group: u32) -> bool {
        let (Some(c), Some(b)) = (self.counter(group), self.bound.as_ref()) else {
            return true;
        };
        if c.load(Ordering::Relaxed) >= b.packets {
            return false;
        }
        c.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Whether a bound is set: the port lends packets a kernel holds, so a
    /// deleted pipe's records get their end at once, not at their release.
    pub(crate) fn is_bounded(&self) -> bool {
        self.bound.is_some()
    }

    /// Gives back the slot of a record of `group` (taken, or not stored).
    #[inline]
    pub(crate) fn give_back(&self, group: u32) {
        if let Some(c) = self.counter(group) {
            let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }
}

struct Control {
    stop: AtomicBool,
    output_parked: AtomicBool,
    /// Set while the output thread is parked with no timeout (nothing queued,
    /// its counts published): a frame the live stage sends then leaves counts
    /// that only the output thread publishes, so the stage wakes it.
    output_asleep: AtomicBool,
    /// The release time up to which the output stage has caught up: of the
    /// frame it handles or waits for, or `u64::MAX` when the line is empty.
    /// `now − this` is how far behind it is; beyond max-lag the live stage
    /// stores nothing for this direction (see [`live`]).
    output_at_ns: AtomicU64,
    /// The release the output thread will be awake for: the one it waits
    /// for, the instant it last found a frame due (it is sending), or
    /// `u64::MAX` while parked; the live stage sends a frame due sooner itself
    /// (see `output::who_sends`).
    output_ready_ns: AtomicU64,
    /// The release the output thread waits for in a timed park, or
    /// `u64::MAX`: the live stage wakes it for a frame due earlier that is
    /// the output thread's to send (see `output::park_until`).
    output_waits_ns: AtomicU64,
    /// How long before a release the output thread must be woken to be on
    /// time, ns: its learnt wake-up (see `wait::WakeEstimate::spin_ns`).
    output_wake_ns: AtomicU64,
    /// How the output thread sleeps and is woken (shared by the directions
    /// one output thread serves, see [`waker`]).
    waker: Arc<waker::Waker>,
    /// Records the live stage stored with a release earlier than one stored
    /// before (see `output::Source`).
    out_of_order: AtomicU64,
    /// The live stage's deleted pipes (see [`FlushSet`]).
    flush: FlushSet,
    /// Records held per pipe, bounded for host mode (see [`HeldPerGroup`]).
    held: HeldPerGroup,
    input: Mutex<InputShared>,
    output: Mutex<OutputShared>,
    huge_pages: bool,
    buffer_bytes: u64,
    error: Mutex<Option<String>>,
    /// Set with `error`: read by the live stage once per turn, without the lock.
    failed: AtomicBool,
    /// What the kernel path of the direction's receive port forwarded, if it
    /// has one (see `live::kernel`): added to the counts as they are read.
    kernel: std::sync::OnceLock<Arc<dyn crate::port::KernelCounter>>,
    /// The kernel path's first too-big frame was told of (see [`Direction::stats`]).
    kernel_warned: AtomicBool,
}

impl Control {
    /// Records the error that stopped a stage: the pair's link stops (the
    /// bridge of one pair reports it and exits, a bridge of several pairs
    /// keeps its other pairs). The first error is kept: it is the cause.
    fn fail(&self, e: String) {
        let mut error = self.error.lock().expect("the lock holders never panic");
        if error.is_none() {
            *error = Some(e);
        }
        self.failed.store(true, Ordering::Release);
    }

    /// Whether a stage of this direction failed ([`Control::fail`]).
    fn has_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Packets the output stage has done with by its last published counts
    /// (sent, late, too big or flushed): equal to the packets stored, nothing
    /// is in flight.
    fn output_done(&self) -> u64 {
        self.output
            .lock()
            .expect("the lock holders never panic")
            .done()
    }

    fn error_text(&self) -> Option<String> {
        self.error
            .lock()
            .expect("the lock holders never panic")
            .clone()
    }

    fn new(huge_pages: bool, buffer_bytes: u64, waker: Arc<waker::Waker>) -> Self {
        Control {
            waker,
            stop: AtomicBool::new(false),
            output_parked: AtomicBool::new(false),
            output_asleep: AtomicBool::new(false),
            output_at_ns: AtomicU64::new(u64::MAX),
            output_ready_ns: AtomicU64::new(u64::MAX),
            output_waits_ns: AtomicU64::new(u64::MAX),
            output_wake_ns: AtomicU64::new(0),
            out_of_order: AtomicU64::new(0),
            flush: FlushSet::default(),
            held: HeldPerGroup::new(None),
            input: Mutex::new(InputShared::default()),
            output: Mutex::new(OutputShared {
                sent: 0,
                sent_bytes: 0,
                copies_sent: 0,
                late: 0,
                too_big: 0,
                tx_errors: 0,
                lateness: options::lateness_histogram(),
                tx_wakeups: 0,
                spin: SpinStats::default(),
                flushed: 0,
                coalesced: 0,
                super_frames: 0,
                whole: 0,
            }),
            huge_pages,
            buffer_bytes,
            error: Mutex::new(None),
            failed: AtomicBool::new(false),
            kernel: std::sync::OnceLock::new(),
            kernel_warned: AtomicBool::new(false),
        }
    }
}

/// A running direction: its output stage (or the plain forwarder) and its
/// counts. Dropping it without [`Direction::stop`] stops it too.
pub struct Direction {
    name: String,
    control: Arc<Control>,
    threads: Vec<JoinHandle<()>>,
}

impl Direction {
    /// Starts a plain forwarder in place of the pipeline: one thread that
    /// sends each received batch straight back out, with no model and no delay
    /// line (`forward.rs`), the baseline benchmarks compare the emulator with.
    pub fn start_forwarder(
        opts: DirectionOptions,
        rx: Box<dyn RxPort>,
        tx: Box<dyn TxPort>,
    ) -> Result<Direction, String> {
        let control = Arc::new(Control::new(false, 0, Arc::new(waker::Waker::new()?)));
        let thread = {
            let control = control.clone();
            std::thread::Builder::new()
                .name(format!("linkem-in-{}", opts.name))
                .spawn(move || forward::forward(control, opts.batch, rx, tx))
                .map_err(|e| format!("cannot start the forwarding thread: {e}"))?
        };
        Ok(Direction {
            name: String::new(),
            control,
            threads: vec![thread],
        }
        .named())
    }

    fn named(mut self) -> Self {
        self.name = self.threads[0]
            .thread()
            .name()
            .unwrap_or("")
            .trim_start_matches("linkem-in-")
            .to_string();
        self
    }

    /// An I/O error that stopped a stage, if any.
    pub fn error(&self) -> Option<String> {
        self.control
            .error
            .lock()
            .expect("the lock holders never panic")
            .clone()
    }

    /// The direction's counts now, merged from what the two stages last
    /// published (the live stage once per batch, the output stage every
    /// 50 ms when it has time to spare and every 500 ms at the latest), so a
    /// running direction's figures may be that old; `in_flight` absorbs the
    /// difference. Takes both stages' locks briefly: call it at human rates,
    /// not per packet.
    pub fn stats(&self) -> DirectionStats {
        let input = self
            .control
            .input
            .lock()
            .expect("the lock holders never panic");
        let output = self
            .control
            .output
            .lock()
            .expect("the lock holders never panic");
        // The model counted accepted packets as delivered; the output stage knows
        // which of them were sent, refused by the kernel, too big or late; the
        // rest are in flight. A refused copy (`duplicate`) is counted against
        // the packets, so the sum stays exact.
        let tx_errors = output.tx_errors.min(output.sent);
        // What the kernel path forwarded (see `live::kernel`): each wire frame
        // received and delivered, with its bytes. A failed read adds nothing.
        let kernel = self
            .control
            .kernel
            .get()
            .and_then(|k| k.counts().ok())
            .unwrap_or_default();
        // Each CPU adds a packet's fields one after the other: a read between
        // two may see a frame before its wire frames.
        let kernel_wire = kernel.wire_frames.max(kernel.frames);
        let mut fates = input.counts;
        fates.set(Fate::Delivered, output.sent - tx_errors + kernel_wire);
        fates.set(Fate::TxError, tx_errors);
        fates.set(Fate::Late, output.late);
        fates.set(Fate::Flushed, output.flushed);
        fates.set(
            Fate::TooBig,
            input.counts.get(Fate::TooBig) + output.too_big + kernel.too_big,
        );
        if kernel.too_big > 0 && !self.control.kernel_warned.swap(true, Ordering::Relaxed) {
            eprintln!(
                "linkem: {}: a frame is larger than the egress interface sends; such frames \
                 are dropped and counted as too-big (raise the egress MTU to carry them)",
                self.name
            );
        }
        DirectionStats {
            name: self.name.clone(),
            fates,
            received: input.received + kernel.frames + kernel.too_big,
            received_bytes: input.received_bytes + kernel.wire_bytes,
            segmented: input.segmented + (kernel_wire - kernel.frames),
            rx_kernel_drops: input.kernel_drops,
            // Saturating: the two sides publish at different moments while running.
            in_flight: input.accepted.saturating_sub(output.done()),
            copies_sent: output.copies_sent,
            coalesced: output.coalesced,
            super_frames: output.super_frames,
            whole: output.whole,
            kernel_forwarded: kernel_wire,
            lateness: output.lateness.clone(),
            delivered_bytes: output.sent_bytes + kernel.wire_bytes,
            delay: input.delay.clone(),
            rx_wakeups: input.rx_wakeups,
            rx_on_beat: input.rx_on_beat,
            rx_yields_lost: input.rx_yields_lost,
            tx_wakeups: output.tx_wakeups,
            spin: output.spin,
            huge_pages: self.control.huge_pages,
            buffer_bytes: self.control.buffer_bytes,
        }
    }

    /// Stops both threads (packets still in the delay line are not sent) and
    /// returns the final counts.
    pub fn stop(mut self) -> DirectionStats {
        self.halt();
        self.stats()
    }

    fn halt(&mut self) {
        self.control.stop.store(true, Ordering::Release);
        self.control.waker.wake();
        for t in &self.threads {
            t.thread().unpark();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Direction {
    fn drop(&mut self) {
        self.halt();
    }
}

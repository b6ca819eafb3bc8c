//! One direction of the live emulator: an input stage and an output stage on
//! two threads, joined by the delay line (TLEM's pipeline, seed 000 §III; DEMU's
//! rx/worker/tx split, seed 002 §2.2).
//!
//! ```text
//!            input thread                       delay line                  output thread
//!  IF_A ─rx─▶ timestamp ─▶ Link::on_arrival ─▶ [release|frame]… (SPSC) ─▶ wait until release ─tx─▶ IF_B
//!            (kernel stamp)  fate + release      one enqueue                sleep far, spin near
//!                 │ drop: counted, never stored   no room: backpressure      later than max-lag: late
//! ```
//!
//! The model runs on the input thread only; the output thread only waits and
//! sends. Neither blocks the other: the only shared state is the delay line's two
//! counters, a flag for waking an idle output thread, and the statistics, which
//! the input side publishes under a lock once per batch, the output side
//! every 50 ms when it has time to spare.

use crate::clock;
use crate::delay_line::{delay_line, Consumer, Producer};
use crate::port::{RxPort, TxPort};
use hdrhistogram::Histogram;
use linkem_core::order::ReleaseQueue;
use linkem_core::{Fate, FateCounts, Link, LinkConfig, PacketMeta};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Default for [`DirectionOptions::spin_ns`], the most the output thread spins
/// before a release time. It spins only as long as a timed sleep has recently
/// been seen to overshoot (learnt per thread, see [`WakeEstimate`]): on a quiet
/// machine a few µs, on a loaded VM 20-100 µs. Lower it to save CPU at the
/// cost of precision; on a machine with cores to spare, raise it and pin threads.
pub const DEFAULT_SPIN_NS: u64 = 200_000;
/// The least the output thread spins, so that a fast wake-up still has room.
const MIN_SPIN_NS: u64 = 3_000;

/// How late a timed sleep of this thread wakes: a maximum over recent sleeps
/// that decays by 1/64 per sleep, so one long preemption is forgotten after a
/// few hundred sleeps while a steady overshoot keeps the spin long enough.
#[derive(Debug, Clone, Copy)]
struct WakeEstimate {
    overshoot_ns: u64,
}

impl WakeEstimate {
    fn spin_ns(&self, max_ns: u64) -> u64 {
        (self.overshoot_ns + self.overshoot_ns / 4 + MIN_SPIN_NS).min(max_ns)
    }

    fn observe(&mut self, overshoot_ns: u64) {
        // A wake-up later than a millisecond is a preemption, not timer latency.
        let o = overshoot_ns.min(1_000_000);
        self.overshoot_ns = o.max(self.overshoot_ns - self.overshoot_ns / 64);
    }
}
/// Keeps the output stage from spinning away the machine: when releases come
/// so close together that every wait is a spin (tens of kpps, with a long
/// learnt spin), a real-time thread would hold its core without pause and
/// starve the input stage and the kernel's packet processing on a small
/// machine. Over each window, if more than half the time went to spinning,
/// the next window spins only [`MIN_SPIN_NS`] and sleeps for the rest.
struct SpinBudget {
    window_start_ns: u64,
    spun_ns: u64,
    frugal: bool,
}

const SPIN_WINDOW_NS: u64 = 10_000_000;

impl SpinBudget {
    fn new(now: u64) -> Self {
        SpinBudget {
            window_start_ns: now,
            spun_ns: 0,
            frugal: false,
        }
    }

    fn tick(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.window_start_ns);
        if elapsed >= SPIN_WINDOW_NS {
            self.frugal = self.spun_ns * 2 > elapsed;
            self.window_start_ns = now;
            self.spun_ns = 0;
        }
    }
}

/// Frames taken per receive call: amortises the per-call cost while keeping one
/// batch's worth of arrivals (at 0.5 Mpps, 64 µs) short.
pub const DEFAULT_BATCH: usize = 32;
/// How long an idle input stage waits in poll before checking for stop or changes.
const IDLE_WAIT_NS: u64 = 10_000_000;
/// Longest single sleep of the output stage, so it notices stop and (when
/// reordering) a newly arrived packet due earlier than the one it waits for.
const MAX_SLEEP_NS: u64 = 10_000_000;
const MAX_SLEEP_REORDER_NS: u64 = 200_000;
/// How often the output stage publishes its counts and lateness when it has
/// time to spare, and at the latest.
const PUBLISH_NS: u64 = 50_000_000;
const PUBLISH_MAX_NS: u64 = 500_000_000;

#[derive(Debug, Clone)]
pub struct DirectionOptions {
    /// For messages: "a->b".
    pub name: String,
    pub link: LinkConfig,
    pub seed: u64,
    /// 0 or 1: separates the random streams of the two directions.
    pub direction: u64,
    pub buffer_bytes: usize,
    pub spin_ns: u64,
    /// Drop a packet that cannot be sent within this many ns of its release time.
    pub max_lag_ns: Option<u64>,
    pub batch: usize,
    /// Run the output stage (and, with `realtime_input`, the input stage) under
    /// SCHED_FIFO at this priority. A woken real-time thread preempts ordinary
    /// ones at once; without it, on a busy machine (traffic generators on the
    /// same cores) a timed wake-up waits for the next scheduler tick, a
    /// millisecond or more, which is what every packet's lateness then shows.
    pub realtime_priority: Option<i32>,
    pub realtime_input: bool,
}

impl DirectionOptions {
    pub fn new(name: &str, link: LinkConfig, seed: u64, direction: u64) -> Self {
        let buffer_bytes = buffer_bytes_for(&link, None);
        DirectionOptions {
            name: name.to_string(),
            link,
            seed,
            direction,
            buffer_bytes,
            spin_ns: DEFAULT_SPIN_NS,
            max_lag_ns: None,
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
/// (1 ms at 10 Gbit/s plus [`SLACK_BYTES`]), so that overload shows as counted
/// `backpressure` drops within tens of milliseconds rather than as seconds of
/// lateness on every packet.
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
#[derive(Debug, Clone)]
pub struct DirectionStats {
    pub name: String,
    /// Fates by the model, with `delivered` meaning sent, and `backpressure`
    /// and `late` filled in by the pipeline.
    pub fates: FateCounts,
    pub received: u64,
    /// Packets accepted and not yet sent or dropped as late.
    pub in_flight: u64,
    /// Extra copies sent by `duplicate`.
    pub copies_sent: u64,
    /// Lateness of sent packets (send time − release time), ns.
    pub lateness: Histogram<u64>,
    pub rx_wakeups: u64,
    pub tx_wakeups: u64,
    pub huge_pages: bool,
    pub buffer_bytes: u64,
}

impl DirectionStats {
    /// received = delivered + every drop + in flight.
    pub fn adds_up(&self) -> bool {
        self.received == self.fates.arrived() + self.in_flight
    }
}

#[derive(Default)]
struct InputShared {
    counts: FateCounts,
    accepted: u64,
    rx_wakeups: u64,
}

struct OutputShared {
    sent: u64,
    copies_sent: u64,
    late: u64,
    lateness: Histogram<u64>,
    tx_wakeups: u64,
}

struct Control {
    stop: AtomicBool,
    pending: Mutex<Option<(u64, LinkConfig)>>,
    has_pending: AtomicBool,
    output_parked: AtomicBool,
    input: Mutex<InputShared>,
    output: Mutex<OutputShared>,
    huge_pages: bool,
    buffer_bytes: u64,
    error: Mutex<Option<String>>,
}

impl Control {
    /// Records the error that stopped a stage (the bridge reports it and exits).
    fn fail(&self, e: String) {
        *self.error.lock().expect("the lock holders never panic") = Some(e);
    }

    fn new(huge_pages: bool, buffer_bytes: u64) -> Self {
        Control {
            stop: AtomicBool::new(false),
            pending: Mutex::new(None),
            has_pending: AtomicBool::new(false),
            output_parked: AtomicBool::new(false),
            input: Mutex::new(InputShared::default()),
            output: Mutex::new(OutputShared {
                sent: 0,
                copies_sent: 0,
                late: 0,
                lateness: lateness_histogram(),
                tx_wakeups: 0,
            }),
            huge_pages,
            buffer_bytes,
            error: Mutex::new(None),
        }
    }
}

/// A running direction. Dropping it without [`Direction::stop`] stops it too.
pub struct Direction {
    name: String,
    control: Arc<Control>,
    threads: Vec<JoinHandle<()>>,
}

/// Puts the calling thread under SCHED_FIFO at `priority` (1..=99).
pub fn set_realtime(priority: i32) -> Result<(), String> {
    set_policy(libc::SCHED_FIFO, priority).map_err(|e| {
        format!(
            "cannot run under SCHED_FIFO priority {priority}: {e} (needs root or CAP_SYS_NICE; \
             pass --realtime off to run without)"
        )
    })
}

/// Sets the calling thread back to ordinary scheduling.
fn set_ordinary() -> Result<(), String> {
    set_policy(libc::SCHED_OTHER, 0).map_err(|e| format!("cannot leave SCHED_FIFO: {e}"))
}

fn set_policy(policy: libc::c_int, priority: i32) -> Result<(), std::io::Error> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // Safety: changes the calling thread's policy; param is a valid sched_param.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), policy, &param) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// A packet this late means the output stage is behind, not waiting: see [`Realtime`].
const BEHIND_NS: u64 = 200_000;

/// SCHED_FIFO for the output stage only while it waits for release times.
///
/// Real-time priority is what makes a timed wake-up punctual on a loaded
/// machine, but a real-time thread that is behind (a backlog of due packets)
/// never blocks, and starves the softirq and ksoftirqd work that delivers
/// and receives the very packets it sends: on two cores the whole path then
/// slows to a fraction of its rate. So the stage drops to ordinary scheduling
/// when it finds itself behind and goes back to SCHED_FIFO when it next has
/// to wait, at the cost of one system call per change.
struct Realtime {
    priority: i32,
    on: bool,
}

impl Realtime {
    fn new(priority: i32) -> Self {
        Realtime {
            priority,
            on: false,
        }
    }

    fn wait_mode(&mut self) -> Result<(), String> {
        if !self.on {
            set_realtime(self.priority)?;
            self.on = true;
        }
        Ok(())
    }

    fn behind(&mut self) {
        if self.on && set_ordinary().is_ok() {
            self.on = false;
        }
    }
}

fn lateness_histogram() -> Histogram<u64> {
    // 1 ns to 100 s at 2 significant digits (values within 1 %): 4k counters,
    // small enough to merge in a few microseconds.
    Histogram::new_with_bounds(1, 100_000_000_000, 2).expect("constant bounds are valid")
}

impl Direction {
    /// Starts the two threads of one direction.
    pub fn start(
        opts: DirectionOptions,
        rx: Box<dyn RxPort>,
        tx: Box<dyn TxPort>,
    ) -> Result<Direction, String> {
        let (producer, consumer) = delay_line(opts.buffer_bytes)?;
        let control = Arc::new(Control::new(
            producer.uses_huge_pages(),
            producer.capacity_bytes(),
        ));
        let reorders = opts.link.reorder_allow || opts.link.reorder_probability > 0.0;
        let out = {
            let control = control.clone();
            let name = format!("linkem-out-{}", opts.name);
            let (spin_ns, max_lag_ns) = (opts.spin_ns, opts.max_lag_ns);
            let prio = opts.realtime_priority;
            std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    let mut realtime = prio.map(Realtime::new);
                    if let Some(Err(e)) = realtime.as_mut().map(Realtime::wait_mode) {
                        control.fail(format!("output stage: {e}"));
                    }
                    output_stage(
                        control, consumer, tx, spin_ns, max_lag_ns, reorders, realtime,
                    )
                })
                .map_err(|e| format!("cannot start the output thread: {e}"))?
        };
        let input = {
            let control = control.clone();
            let out_thread = out.thread().clone();
            std::thread::Builder::new()
                .name(format!("linkem-in-{}", opts.name))
                .spawn(move || {
                    if let (Some(p), true) = (opts.realtime_priority, opts.realtime_input) {
                        if let Err(e) = set_realtime(p) {
                            control.fail(format!("input stage: {e}"));
                        }
                    }
                    input_stage(control, opts, producer, rx, out_thread)
                })
                .map_err(|e| format!("cannot start the input thread: {e}"))?
        };
        Ok(Direction {
            name: String::new(),
            control,
            threads: vec![input, out],
        }
        .named())
    }

    /// Starts a plain forwarder in place of the pipeline: one thread that sends
    /// each received batch straight back out, with no model, no delay line and
    /// no timestamps. It is the baseline that benchmarks compare the emulator
    /// with (the same sockets, the same batches, nothing else); frames the
    /// backend cannot take count as `backpressure`.
    pub fn start_forwarder(
        opts: DirectionOptions,
        mut rx: Box<dyn RxPort>,
        mut tx: Box<dyn TxPort>,
    ) -> Result<Direction, String> {
        let control = Arc::new(Control::new(false, 0));
        let thread = {
            let control = control.clone();
            std::thread::Builder::new()
                .name(format!("linkem-in-{}", opts.name))
                .spawn(move || {
                    let (mut sent, mut refused, mut wakeups) = (0u64, 0u64, 0u64);
                    let publish = |sent: u64, refused: u64, wakeups: u64| {
                        let mut counts = FateCounts::default();
                        counts.set(Fate::Delivered, sent);
                        counts.set(Fate::Backpressure, refused);
                        let mut input = control.input.lock().expect("the lock holders never panic");
                        input.counts = counts;
                        input.accepted = sent;
                        input.rx_wakeups = wakeups;
                        drop(input);
                        control
                            .output
                            .lock()
                            .expect("the lock holders never panic")
                            .sent = sent;
                    };
                    let fail = |e: String| control.fail(e);
                    while !control.stop.load(Ordering::Acquire) {
                        let result = rx.rx_batch(opts.batch, &mut |frame| {
                            if tx.tx_push(frame.data) {
                                sent += 1;
                            } else {
                                refused += 1;
                            }
                        });
                        match result {
                            Ok(0) => {
                                publish(sent, refused, wakeups);
                                if let Err(e) = rx.wait_rx(IDLE_WAIT_NS) {
                                    fail(format!("receive: {e}"));
                                    break;
                                }
                                wakeups += 1;
                            }
                            Ok(_) => {
                                if let Err(e) = tx.tx_flush() {
                                    fail(format!("send: {e}"));
                                    break;
                                }
                                publish(sent, refused, wakeups);
                            }
                            Err(e) => {
                                fail(format!("receive: {e}"));
                                break;
                            }
                        }
                    }
                    let _ = tx.tx_flush();
                    publish(sent, refused, wakeups);
                })
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

    /// Applies new link parameters at the next batch, stamped with the time of
    /// the request; packets already in the delay line keep their release times.
    pub fn reconfigure(&self, link: LinkConfig) {
        *self
            .control
            .pending
            .lock()
            .expect("the lock holders never panic") = Some((clock::now_ns(), link));
        self.control.has_pending.store(true, Ordering::Release);
    }

    /// An I/O error that stopped a stage, if any.
    pub fn error(&self) -> Option<String> {
        self.control
            .error
            .lock()
            .expect("the lock holders never panic")
            .clone()
    }

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
        // which of them were sent and which were late; the rest are in flight.
        let mut fates = input.counts;
        fates.set(Fate::Delivered, output.sent);
        fates.set(Fate::Late, output.late);
        let accepted = input.accepted;
        DirectionStats {
            name: self.name.clone(),
            fates,
            received: input.counts.arrived(),
            in_flight: accepted - output.sent - output.late,
            copies_sent: output.copies_sent,
            lateness: output.lateness.clone(),
            rx_wakeups: input.rx_wakeups,
            tx_wakeups: output.tx_wakeups,
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

fn input_stage(
    control: Arc<Control>,
    opts: DirectionOptions,
    mut producer: Producer,
    mut rx: Box<dyn RxPort>,
    output: std::thread::Thread,
) {
    let mut link = Link::new(opts.link, opts.seed, opts.direction);
    let mut accepted: u64 = 0;
    let mut backpressure: u64 = 0;
    let mut wakeups: u64 = 0;
    let publish = |link: &Link, accepted: u64, backpressure: u64, wakeups: u64| {
        let mut shared = control.input.lock().expect("the lock holders never panic");
        let mut counts = *link.counts();
        // The model counted these as delivered; the delay line had no room.
        counts.set(Fate::Delivered, counts.get(Fate::Delivered) - backpressure);
        counts.set(Fate::Backpressure, backpressure);
        shared.counts = counts;
        shared.accepted = accepted;
        shared.rx_wakeups = wakeups;
    };
    while !control.stop.load(Ordering::Acquire) {
        if control.has_pending.swap(false, Ordering::AcqRel) {
            if let Some((at_ns, cfg)) = control
                .pending
                .lock()
                .expect("the lock holders never panic")
                .take()
            {
                link.reconfigure(at_ns, cfg);
            }
        }
        let mut pushed = false;
        let result = rx.rx_batch(opts.batch, &mut |frame| {
            let ts = if frame.ts_ns != 0 {
                frame.ts_ns
            } else {
                clock::now_ns()
            };
            let v = link.on_arrival(
                ts,
                PacketMeta {
                    len_bytes: frame.orig_len,
                },
            );
            if v.fate != Fate::Delivered {
                return;
            }
            let ok = match v.corrupt_bit {
                Some(bit) if (bit / 8) < frame.data.len() as u32 => {
                    let mut copy = frame.data.to_vec();
                    copy[(bit / 8) as usize] ^= 0x80 >> (bit % 8);
                    producer.push(v.release_ns, &copy, false)
                }
                _ => producer.push(v.release_ns, frame.data, false),
            };
            if ok {
                accepted += 1;
                pushed = true;
                if v.duplicate {
                    // A copy that finds no room is not a lost packet: the original is on its way.
                    let _ = producer.push(v.release_ns, frame.data, true);
                }
            } else {
                backpressure += 1;
            }
        });
        match result {
            Ok(0) => {
                publish(&link, accepted, backpressure, wakeups);
                if let Err(e) = rx.wait_rx(IDLE_WAIT_NS) {
                    control.fail(format!("receive: {e}"));
                    break;
                }
                wakeups += 1;
            }
            Ok(_) => {
                if pushed && control.output_parked.load(Ordering::Acquire) {
                    output.unpark();
                }
                publish(&link, accepted, backpressure, wakeups);
            }
            Err(e) => {
                control.fail(format!("receive: {e}"));
                break;
            }
        }
    }
    publish(&link, accepted, backpressure, wakeups);
    producer.close();
}

/// A packet moved out of the delay line when the link may reorder.
struct Held {
    frame: Vec<u8>,
    copy: bool,
}

struct OutputState {
    tx: Box<dyn TxPort>,
    local_sent: u64,
    local_copies: u64,
    local_late: u64,
    lateness: Histogram<u64>,
    wakeups: u64,
    queued: bool,
    max_lag_ns: Option<u64>,
}

impl OutputState {
    /// Sends (or drops as late) one frame due now; returns false on an I/O error.
    fn send(&mut self, now: u64, release_ns: u64, frame: &[u8], copy: bool) -> Result<(), String> {
        let lateness = now.saturating_sub(release_ns);
        if self.max_lag_ns.is_some_and(|m| lateness > m) {
            if !copy {
                self.local_late += 1;
            }
            return Ok(());
        }
        if !self.tx.tx_push(frame) {
            self.tx.tx_flush().map_err(|e| format!("send: {e}"))?;
            if !self.tx.tx_push(frame) {
                // The kernel keeps refusing: wait for room rather than drop, since
                // this packet was promised; lateness records the cost.
                let mut tries = 0;
                while !self.tx.tx_push(frame) {
                    std::thread::yield_now();
                    self.tx.tx_flush().map_err(|e| format!("send: {e}"))?;
                    tries += 1;
                    if tries > 100_000 {
                        return Err("send: the interface accepts no frames".into());
                    }
                }
            }
        }
        self.queued = true;
        let _ = self.lateness.record(lateness.max(1));
        if copy {
            self.local_copies += 1;
        } else {
            self.local_sent += 1;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), String> {
        if self.queued {
            self.queued = false;
            self.tx.tx_flush().map_err(|e| format!("send: {e}"))?;
        }
        Ok(())
    }
}

fn output_stage(
    control: Arc<Control>,
    mut consumer: Consumer,
    tx: Box<dyn TxPort>,
    spin_ns: u64,
    max_lag_ns: Option<u64>,
    reorders: bool,
    mut realtime: Option<Realtime>,
) {
    clock::set_timer_slack_ns(1);
    let mut st = OutputState {
        tx,
        local_sent: 0,
        local_copies: 0,
        local_late: 0,
        lateness: lateness_histogram(),
        wakeups: 0,
        queued: false,
        max_lag_ns,
    };
    let mut heap: ReleaseQueue<Held> = ReleaseQueue::new();
    let mut wake = WakeEstimate {
        overshoot_ns: 50_000,
    };
    let mut last_publish = clock::now_ns();
    let mut budget = SpinBudget::new(last_publish);
    let max_sleep = if reorders {
        MAX_SLEEP_REORDER_NS
    } else {
        MAX_SLEEP_NS
    };
    let publish = |st: &mut OutputState| {
        let mut shared = control.output.lock().expect("the lock holders never panic");
        shared.sent = st.local_sent;
        shared.copies_sent = st.local_copies;
        shared.late = st.local_late;
        shared.tx_wakeups = st.wakeups;
        shared.lateness.add(&st.lateness).expect("same bounds");
        st.lateness.reset();
    };
    let fail = |e: String| control.fail(e);
    loop {
        if control.stop.load(Ordering::Acquire) {
            break;
        }
        // The next release: the head of the line, or (when reordering) of the heap.
        let next = if reorders {
            while let Some(h) = consumer.peek() {
                let held = Held {
                    frame: h.frame.to_vec(),
                    copy: h.copy,
                };
                heap.push(h.release_ns, held);
                consumer.pop();
            }
            heap.peek_release_ns()
        } else {
            consumer.peek().map(|h| h.release_ns)
        };
        let now = clock::now_ns();
        // Merging the histogram costs microseconds: do it when the next packet
        // is not due soon, or at the latest every PUBLISH_MAX_NS under
        // continuous traffic, so that it never delays a send.
        let since = now.wrapping_sub(last_publish);
        let slack = next.is_none_or(|r| r > now + spin_ns + 200_000);
        if (since > PUBLISH_NS && slack) || since > PUBLISH_MAX_NS {
            last_publish = now;
            publish(&mut st);
        }
        let Some(release_ns) = next else {
            if let Err(e) = st.flush() {
                fail(e);
                break;
            }
            if consumer.is_finished() {
                break;
            }
            if let Some(rt) = realtime.as_mut() {
                let _ = rt.wait_mode();
            }
            control.output_parked.store(true, Ordering::Release);
            // Re-check after announcing the park, so a push in between is not missed.
            if consumer.peek().is_none() {
                std::thread::park_timeout(std::time::Duration::from_nanos(max_sleep));
                st.wakeups += 1;
            }
            control.output_parked.store(false, Ordering::Release);
            continue;
        };
        if release_ns > now {
            // Hand over what is queued before waiting, so it is not held back.
            if let Err(e) = st.flush() {
                fail(e);
                break;
            }
            if let Some(rt) = realtime.as_mut() {
                // Failing to return to SCHED_FIFO costs precision, not packets.
                let _ = rt.wait_mode();
            }
            let wait = release_ns - now;
            let spin = if budget.frugal {
                MIN_SPIN_NS
            } else {
                wake.spin_ns(spin_ns)
            };
            if wait > spin {
                let target = now + (wait - spin).min(max_sleep);
                clock::sleep_until_ns(target);
                wake.observe(clock::now_ns().saturating_sub(target));
                st.wakeups += 1;
            } else {
                while clock::now_ns() < release_ns {
                    std::hint::spin_loop();
                }
                budget.spun_ns += release_ns - now;
            }
            budget.tick(now);
            continue;
        }
        if now - release_ns > BEHIND_NS {
            if let Some(rt) = realtime.as_mut() {
                rt.behind();
            }
        }
        let result = if reorders {
            let (release_ns, h) = heap.pop().expect("peeked above");
            st.send(now, release_ns, &h.frame, h.copy)
        } else {
            let h = consumer.peek().expect("peeked above");
            let (r, c) = (h.release_ns, h.copy);
            // Safety of the borrow: the frame is copied into the backend before pop.
            let frame = h.frame;
            let res = st.send(now, r, frame, c);
            consumer.pop();
            res
        };
        if let Err(e) = result {
            fail(e);
            break;
        }
    }
    let _ = st.flush();
    publish(&mut st);
}

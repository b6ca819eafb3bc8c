//! The output stage: waits for each frame's release time and hands it to the
//! send port, or drops it as `late` when it is more than max-lag behind; tells
//! the input stage how far it has got (the release time it handles or waits
//! for), so that no backlog builds up in the delay line.

use super::coalesce::{Offer, Pending};
use super::options::lateness_histogram;
use super::wait::{Realtime, SpinBudget, WakeEstimate, BEHIND_NS, MIN_SPIN_NS};
use super::{Control, FlushSet};
use crate::clock;
use crate::delay_line::Consumer;
use crate::port::{TxOutcome, TxPort};
use hdrhistogram::Histogram;
use linkem_core::order::ReleaseQueue;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Longest single sleep of the output stage, so it notices stop and (when
/// reordering) a newly arrived packet due earlier than the one it waits for.
pub(super) const MAX_SLEEP_NS: u64 = 10_000_000;
pub(super) const MAX_SLEEP_REORDER_NS: u64 = 200_000;
/// How often the output stage publishes its counts and lateness when it has
/// time to spare, and at the latest.
pub(super) const PUBLISH_NS: u64 = 50_000_000;
pub(super) const PUBLISH_MAX_NS: u64 = 500_000_000;

/// A packet moved out of the delay line when the link may reorder.
struct Held {
    frame: Vec<u8>,
    copy: bool,
    group: u32,
}

pub(super) struct OutputState {
    pub(super) tx: Box<dyn TxPort>,
    local_sent: u64,
    local_copies: u64,
    local_late: u64,
    pub(super) local_flushed: u64,
    local_too_big: u64,
    lateness: Histogram<u64>,
    pub(super) wakeups: u64,
    queued: bool,
    max_lag_ns: Option<u64>,
    /// The super-frame being built, when coalescing (see [`super::coalesce`]).
    coalesce: Option<Pending>,
    local_coalesced: u64,
    local_super_frames: u64,
}

impl OutputState {
    pub(super) fn new(
        tx: Box<dyn TxPort>,
        max_lag_ns: Option<u64>,
        coalesce_window_ns: Option<u64>,
    ) -> Self {
        let coalesce = coalesce_window_ns
            .filter(|_| tx.sends_super_frames())
            .map(Pending::new);
        OutputState {
            coalesce,
            local_coalesced: 0,
            local_super_frames: 0,
            tx,
            local_sent: 0,
            local_copies: 0,
            local_late: 0,
            local_flushed: 0,
            local_too_big: 0,
            lateness: lateness_histogram(),
            wakeups: 0,
            queued: false,
            max_lag_ns,
        }
    }

    /// Takes the next frame of `src`, due now: discarded as `flushed` when its
    /// group was flushed (a deleted pipe's), else sent.
    pub(super) fn send_next(
        &mut self,
        now: u64,
        src: &mut Source,
        flush: &FlushSet,
    ) -> Result<(), String> {
        src.take(|r, frame, copy, group| {
            if flush.contains(group) {
                if !copy {
                    self.local_flushed += 1;
                    self.tx.tx_discard(frame);
                }
                return Ok(());
            }
            self.send(now, r, frame, copy)
        })
    }

    /// Sends (or drops as late) one frame due now; an error stops the stage.
    pub(super) fn send(
        &mut self,
        now: u64,
        release_ns: u64,
        frame: &[u8],
        copy: bool,
    ) -> Result<(), String> {
        let lateness = now.saturating_sub(release_ns);
        if self.max_lag_ns.is_some_and(|m| lateness > m) {
            if !copy {
                self.local_late += 1;
                self.tx.tx_discard(frame);
            }
            return Ok(());
        }
        if let Some(p) = self.coalesce.as_mut().filter(|_| !copy) {
            match p.offer(frame, release_ns) {
                Offer::Joined => return Ok(()),
                Offer::StartsNew(seg) => {
                    self.emit_pending()?;
                    if let Some(p) = self.coalesce.as_mut() {
                        p.start(frame, seg, release_ns);
                    }
                    return Ok(());
                }
                Offer::Alone => self.emit_pending()?,
            }
        } else if copy {
            // A copy leaves after what was held (release order).
            self.emit_pending()?;
        }
        match self.push(frame)? {
            TxOutcome::Queued => {}
            TxOutcome::TooBig => {
                // The input stage checks sizes first; a port that shrank since is
                // still counted, never silently.
                if !copy {
                    self.local_too_big += 1;
                }
                return Ok(());
            }
            TxOutcome::NoRoom => unreachable!("push retries until there is room"),
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

    /// Sends what the coalescer holds: a super-frame through the port's
    /// offload path (or, if the kernel refuses it, its wire frames one by one
    /// through the ring), a single frame through the ring. Each wire frame
    /// counts as sent with its lateness against its own release time.
    fn emit_pending(&mut self) -> Result<(), String> {
        let Some(p) = self.coalesce.as_mut() else {
            return Ok(());
        };
        let Some((frame, offload, releases)) = p.take() else {
            return Ok(());
        };
        let tx = &mut *self.tx;
        let mut whole = offload.gso.is_some();
        let mut tries = 0u32;
        while whole {
            match tx.tx_send_super(frame, offload) {
                Ok(true) => break,
                Ok(false) if tries < 100_000 => {
                    tries += 1;
                    std::thread::yield_now();
                }
                // Refused for good: the wire frames leave one by one.
                _ => whole = false,
            }
        }
        let mut too_big = 0u64;
        if whole {
            self.local_super_frames += 1;
            self.local_coalesced += releases.len() as u64;
        } else {
            let max = tx.max_frame_bytes();
            let mut err = None;
            let mut each = |f: &[u8]| match push_until_taken(tx, f) {
                Ok(TxOutcome::Queued) => {}
                Ok(_) => too_big += 1,
                Err(e) => err = Some(e),
            };
            if offload.gso.is_some() {
                let _ = linkem_core::wire::segment(frame, offload, max, &mut each);
            } else {
                each(frame);
            }
            if let Some(e) = err {
                return Err(e);
            }
            self.queued = true;
        }
        let now = clock::now_ns();
        for &r in releases {
            let _ = self.lateness.record(now.saturating_sub(r).max(1));
        }
        let n = releases.len() as u64;
        self.local_sent += n - too_big.min(n);
        self.local_too_big += too_big.min(n);
        Ok(())
    }

    /// Offers a frame until the port takes or refuses it for good.
    fn push(&mut self, frame: &[u8]) -> Result<TxOutcome, String> {
        push_until_taken(&mut *self.tx, frame)
    }

    /// Once no more frames of this direction are due now (`next_ns`: the
    /// next release waiting, `None`: none): sends what the coalescer holds
    /// unless a frame due within its window may still join it. Both output
    /// stages call it before they wait, so held frames never outlive the
    /// window (plus a wake-up) nor wait for traffic that is not coming.
    pub(super) fn release_held(&mut self, next_ns: Option<u64>) -> Result<(), String> {
        if self
            .coalesce
            .as_ref()
            .is_some_and(|p| p.must_leave(next_ns))
        {
            self.emit_pending()?;
        }
        Ok(())
    }

    /// Before waiting for a frame due at `next_ns` (`None`: none waiting):
    /// [`OutputState::release_held`], then hands the kernel what is queued.
    pub(super) fn flush_before(&mut self, next_ns: Option<u64>) -> Result<(), String> {
        self.release_held(next_ns)?;
        self.flush()
    }

    pub(super) fn flush(&mut self) -> Result<(), String> {
        if self.queued {
            self.queued = false;
            self.tx.tx_flush().map_err(|e| format!("send: {e}"))?;
        }
        Ok(())
    }

    pub(super) fn publish(&mut self, control: &Control) {
        let tx_errors = self.tx.tx_errors();
        let mut shared = control.output.lock().expect("the lock holders never panic");
        shared.sent = self.local_sent;
        shared.copies_sent = self.local_copies;
        shared.late = self.local_late;
        shared.flushed = self.local_flushed;
        shared.too_big = self.local_too_big;
        shared.tx_errors = tx_errors;
        shared.tx_wakeups = self.wakeups;
        shared.coalesced = self.local_coalesced;
        shared.super_frames = self.local_super_frames;
        shared.lateness.add(&self.lateness).expect("same bounds");
        self.lateness.reset();
    }
}

/// Offers a frame until the port takes or refuses it for good.
fn push_until_taken(tx: &mut dyn TxPort, frame: &[u8]) -> Result<TxOutcome, String> {
    let mut tries = 0;
    loop {
        match tx.tx_push(frame) {
            TxOutcome::NoRoom => {}
            done => return Ok(done),
        }
        // The kernel has no room: wait for it rather than drop, since this
        // packet was promised; lateness records the cost (and max-lag bounds it).
        if tries > 0 {
            std::thread::yield_now();
        }
        tx.tx_flush().map_err(|e| format!("send: {e}"))?;
        tries += 1;
        if tries > 100_000 {
            return Err("send: the interface accepts no frames".into());
        }
    }
}

/// Where the output stage takes its next frame from: the delay line itself, or
/// (when the link may reorder) a heap ordered by release time fed from it.
///
/// With `sorted_runs` (the node stage), the producer counts in
/// [`Control::out_of_order`] every record whose release is earlier than one it
/// stored before. While that count has not moved, every record in the line is
/// at least as late as every record stored before it, so the line is sorted
/// and no earlier than anything in the heap: frames leave from the line
/// directly, uncopied. When the count moves, the whole line goes into the heap
/// (as without `sorted_runs`), and the frames of the heap leave first.
pub(super) struct Source {
    pub(super) consumer: Consumer,
    heap: Option<ReleaseQueue<Held>>,
    sorted_runs: Option<Arc<Control>>,
    /// The out-of-order count already moved into the heap.
    handled: u64,
}

impl Source {
    /// The source of a direction whose stage runs with `cfg` (as
    /// [`output_stage`] builds it).
    pub(super) fn new(consumer: Consumer, cfg: &OutputConfig, control: &Arc<Control>) -> Source {
        Source {
            consumer,
            heap: cfg.reorders.then(ReleaseQueue::new),
            sorted_runs: (cfg.reorders && cfg.sorted_runs).then(|| control.clone()),
            handled: 0,
        }
    }

    /// The next release time, if any frame is waiting.
    pub(super) fn next_release(&mut self) -> Option<u64> {
        let Some(heap) = self.heap.as_mut() else {
            return self.consumer.peek().map(|h| h.release_ns);
        };
        if let Some(control) = &self.sorted_runs {
            // Acquire: the records counted are in the line when it is read.
            let count = control.out_of_order.load(Ordering::Acquire);
            if count == self.handled {
                let line = self.consumer.peek().map(|h| h.release_ns);
                return match (heap.peek_release_ns(), line) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            self.handled = count;
        }
        while let Some(h) = self.consumer.peek() {
            let held = Held {
                frame: h.frame.to_vec(),
                copy: h.copy,
                group: h.group,
            };
            heap.push(h.release_ns, held);
            self.consumer.pop();
        }
        heap.peek_release_ns()
    }

    /// Hands the next frame to `f` and removes it.
    pub(super) fn take<R>(&mut self, f: impl FnOnce(u64, &[u8], bool, u32) -> R) -> R {
        if let Some(heap) = self.heap.as_mut() {
            // Without sorted runs, `next_release` moved the whole line into
            // the heap: the heap's first frame is the one it found.
            let line = self
                .sorted_runs
                .as_ref()
                .and_then(|_| self.consumer.peek().map(|h| h.release_ns));
            let from_heap = match (heap.peek_release_ns(), line) {
                (Some(a), Some(b)) => a <= b,
                (a, _) => a.is_some(),
            };
            if from_heap {
                let (release_ns, h) = heap.pop().expect("next_release found one");
                return f(release_ns, &h.frame, h.copy, h.group);
            }
        }
        let h = self.consumer.peek().expect("next_release found one");
        // The frame is copied into the backend before the record is released.
        let r = f(h.release_ns, h.frame, h.copy, h.group);
        self.consumer.pop();
        r
    }
}

pub(super) struct OutputConfig {
    pub spin_ns: u64,
    pub max_lag_ns: Option<u64>,
    pub reorders: bool,
    /// With `reorders`: the producer counts its out-of-order records (see [`Source`]).
    pub sorted_runs: bool,
    /// Coalesce TCP wire frames due within this window into super-frames
    /// (when the port can send them); `None`: off. See [`super::coalesce`].
    pub coalesce_window_ns: Option<u64>,
}

// Kept whole: the stage's per-frame hot loop; `idle` and `wait_until` are its cold branches.
pub(super) fn output_stage(
    control: Arc<Control>,
    consumer: Consumer,
    tx: Box<dyn TxPort>,
    cfg: OutputConfig,
    mut realtime: Option<Realtime>,
) {
    clock::set_timer_slack_ns(1);
    let mut st = OutputState::new(tx, cfg.max_lag_ns, cfg.coalesce_window_ns);
    let mut src = Source {
        consumer,
        heap: cfg.reorders.then(ReleaseQueue::new),
        sorted_runs: (cfg.reorders && cfg.sorted_runs).then(|| control.clone()),
        handled: 0,
    };
    let mut wake = WakeEstimate {
        overshoot_ns: 50_000,
    };
    let mut last_publish = clock::now_ns();
    let mut budget = SpinBudget::new(last_publish);
    let max_sleep = if cfg.reorders {
        MAX_SLEEP_REORDER_NS
    } else {
        MAX_SLEEP_NS
    };
    let spin_ns = cfg.spin_ns;
    while !control.stop.load(Ordering::Acquire) {
        let next = src.next_release();
        // One relaxed store per frame; the input stage reads it once per batch.
        control
            .output_at_ns
            .store(next.unwrap_or(u64::MAX), Ordering::Relaxed);
        let now = clock::now_ns();
        // Merging the histogram costs microseconds: do it when the next packet
        // is not due soon, or at the latest every PUBLISH_MAX_NS under
        // continuous traffic, so that it never delays a send.
        let since = now.wrapping_sub(last_publish);
        let slack = next.is_none_or(|r| r > now + spin_ns + 200_000);
        if (since > PUBLISH_NS && slack) || since > PUBLISH_MAX_NS {
            last_publish = now;
            st.publish(&control);
        }
        let Some(release_ns) = next else {
            match idle(&control, &mut st, &mut src, realtime.as_mut(), max_sleep) {
                Ok(true) => continue,
                Ok(false) => break,
                Err(e) => {
                    control.fail(e);
                    break;
                }
            }
        };
        if release_ns > now {
            // Hand over what is queued before waiting, so it is not held back.
            if let Err(e) = st.flush_before(Some(release_ns)) {
                control.fail(e);
                break;
            }
            if let Some(rt) = realtime.as_mut() {
                // Failing to return to SCHED_FIFO costs precision, not packets.
                let _ = rt.wait_mode();
            }
            let spin = if budget.frugal {
                MIN_SPIN_NS
            } else {
                wake.spin_ns(spin_ns)
            };
            if wait_until(release_ns, now, spin, max_sleep, &mut wake, &mut budget) {
                st.wakeups += 1;
            }
            continue;
        }
        if now - release_ns > BEHIND_NS {
            if let Some(rt) = realtime.as_mut() {
                rt.busy(now);
            }
        }
        if let Err(e) = st.send_next(now, &mut src, &control.flush) {
            control.fail(e);
            break;
        }
    }
    let _ = st.flush_before(None);
    control.output_at_ns.store(u64::MAX, Ordering::Relaxed);
    st.publish(&control);
}

/// Nothing to send: hands over what is queued, then parks until the input
/// stage pushes (it unparks a parked stage) or `max_sleep` passes. Returns
/// false once the line is closed and empty.
fn idle(
    control: &Control,
    st: &mut OutputState,
    src: &mut Source,
    realtime: Option<&mut Realtime>,
    max_sleep: u64,
) -> Result<bool, String> {
    st.flush_before(None)?;
    if src.consumer.is_finished() {
        return Ok(false);
    }
    if let Some(rt) = realtime {
        let _ = rt.wait_mode();
    }
    control.output_parked.store(true, Ordering::Release);
    // Re-check after announcing the park, so a push in between is not missed.
    // The store above and the load in `peek` need a full fence between them
    // (x86 lets a load pass an earlier store), matching the one the input stage
    // puts between its push and its look at `output_parked`; without both, each
    // side can miss the other and the stage sleeps `max_sleep` (10 ms) with a
    // frame due: late drops right after start.
    std::sync::atomic::fence(Ordering::SeqCst);
    if src.consumer.peek().is_none() {
        std::thread::park_timeout(std::time::Duration::from_nanos(max_sleep));
        st.wakeups += 1;
    }
    control.output_parked.store(false, Ordering::Release);
    Ok(true)
}

/// Sleeps until `spin` before `release_ns` (at most `max_sleep`), or spins to
/// it when it is that close. Returns true when it slept.
fn wait_until(
    release_ns: u64,
    now: u64,
    spin: u64,
    max_sleep: u64,
    wake: &mut WakeEstimate,
    budget: &mut SpinBudget,
) -> bool {
    let wait = release_ns - now;
    let slept = wait > spin;
    if slept {
        let target = now + (wait - spin).min(max_sleep);
        clock::sleep_until_ns(target);
        wake.observe(clock::now_ns().saturating_sub(target));
    } else {
        while clock::now_ns() < release_ns {
            std::hint::spin_loop();
        }
        budget.spun_ns += release_ns - now;
    }
    budget.tick(now);
    slept
}

//! The output stage: waits for each frame's release time and hands it to the
//! send port, or drops it as `late` when it is more than max-lag behind; tells
//! the input stage how far it has got (the release time it handles or waits
//! for), so that no backlog builds up in the delay line.
//!
//! **Who sends.** A direction's waiting frames (its delay line and reorder
//! heap, [`Source`]) and its send port are one [`Outlet`] behind a lock, and
//! whoever holds the lock is the line's one consumer and the port's one
//! sender: the output thread while it handles a due frame (it lets go while
//! it waits or parks), or the live stage right after storing a batch. The
//! live stage sends at once what is due by now ([`Outlet::send_due_with`]; if the
//! output thread holds the lock, it is awake and sends them), and takes the
//! next release on itself when that is due before the output thread could be
//! woken for it ([`who_sends`]: `release ≤ now + wake`, `wake` the output
//! thread's learnt wake-up ([`WakeEstimate::spin_ns`]), and the output thread
//! not already awake for it), or within [`STAGE_HORIZON_NS`] while the output
//! thread is parked, going round its own loop (asleep in its poll until
//! then) instead of waking the output thread; with the output thread asleep it
//! also publishes that thread's counts ([`Outlet::publish_for_asleep`]). So
//! `delay 0` and small delays on sparse traffic cost no wake-up after the
//! stage's own, and a release closer than a wake-up is not late by one.
//!
//! **When.** A frame is handed to the port its send lead before its release
//! ([`TxPort::send_lead_ns`]: the time the port learnt a frame takes from
//! the send call to the kernel's stamp of it reaching the host, 1-2 µs on a
//! veth; 0 where it learns none), so that it reaches the host at its
//! release. The one place that applies it is [`OutletInner::next_release`]:
//! every instant the senders compare with their clock, wait for, publish or
//! record lateness against is the release less the lead, so both senders,
//! the waker and `max-lag` agree.
//!
//! Order: both senders take the frame with the earliest release from the one
//! source under the one lock, so a frame leaves only after every frame with
//! an earlier release that was stored before it (whichever thread sends it).
//! Cost: one uncontended lock and unlock per frame on the output thread and
//! per batch on the live stage (tens of ns), and the time the live stage now
//! spends sending, which includes the receiving host's kernel path inside the
//! send call (veth runs it there), time the output thread's core spent before.

use super::coalesce::{Offer, Pending};
use super::options::lateness_histogram;
use super::wait::{Realtime, SpinBudget, WakeEstimate, BEHIND_NS};
use super::wake::{lead_ns, learn, wait_target, ONE_SLEEP_NS};
use super::waker::Woke;
use super::{Control, FlushSet};
use crate::clock;
use crate::delay_line::{Consumer, Head, Whole};
use crate::port::{TxOutcome, TxPort};
use hdrhistogram::Histogram;
use linkem_core::order::ReleaseQueue;
use linkem_core::wire::Offload;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

mod send;
mod source;
mod who;
use send::*;
pub(super) use source::Source;

#[cfg(test)]
pub(super) use who::stage_sends;
pub use who::STAGE_HORIZON_NS;
pub(super) use who::{who_sends, Sender};

/// Longest single wait of the output stage: a deleted pipe's frames (host
/// mode) are seen within it. A stop, and a frame due earlier than the one it
/// waits for, wake it (at once, or at that frame's lead, [`park_until`]).
pub(super) const MAX_SLEEP_NS: u64 = 10_000_000;
/// How often the output stage publishes its counts and lateness when it has
/// time to spare, and at the latest.
pub(super) const PUBLISH_NS: u64 = 50_000_000;
pub(super) const PUBLISH_MAX_NS: u64 = 500_000_000;
/// How long ago the output stage must have last gone idle for it to publish
/// its counts as it goes idle again, instead of parking with a timeout for
/// them: a sparse link's packet then costs no wake-up after its release,
/// while a link that goes idle between bursts many times a second does not
/// merge its histogram (tens of µs) each time.
pub(super) const IDLE_PUBLISH_NS: u64 = 10_000_000;

pub(super) struct OutputState {
    pub(super) tx: Box<dyn TxPort>,
    local_sent: u64,
    /// Bytes of the wire frames counted in `local_sent`.
    local_sent_bytes: u64,
    local_copies: u64,
    local_late: u64,
    pub(super) local_flushed: u64,
    local_too_big: u64,
    lateness: Histogram<u64>,
    pub(super) wakeups: u64,
    /// The thread's waiting, set before each [`OutputState::publish`].
    pub(super) spin: super::SpinStats,
    /// Frames were handled since the last [`OutputState::publish`].
    pub(super) changed: bool,
    queued: bool,
    max_lag_ns: Option<u64>,
    /// The super-frame being built, when coalescing (see [`super::coalesce`]).
    coalesce: Option<Pending>,
    local_coalesced: u64,
    local_super_frames: u64,
    /// Wire frames that crossed inside a received super-frame stored whole.
    local_whole: u64,
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
            local_whole: 0,
            tx,
            local_sent: 0,
            local_sent_bytes: 0,
            local_copies: 0,
            local_late: 0,
            local_flushed: 0,
            local_too_big: 0,
            lateness: lateness_histogram(),
            wakeups: 0,
            spin: super::SpinStats::default(),
            changed: false,
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
        held: &super::HeldPerGroup,
    ) -> Result<(), String> {
        self.changed = true;
        src.take(|r, frame, kind| {
            held.give_back(kind.group);
            if kind.discarded {
                return Ok(()); // ended and counted when its pipe went
            }
            if flush.contains(kind.group) {
                if let Some(w) = kind.whole {
                    self.local_flushed += u64::from(w.wire_frames);
                } else if !kind.copy {
                    self.local_flushed += 1;
                    self.discard(frame);
                }
                return Ok(());
            }
            match kind.whole {
                Some(w) => self.send_whole(now, r, frame, w),
                None => self.send(now, r, frame, kind.copy, kind.checksummed),
            }
        })
    }

    /// Sends (or drops as late) a super-frame the live stage stored whole,
    /// due now: its wire frames share one release, so they are all late or
    /// all sent, each counted with the same lateness. What the coalescer
    /// holds leaves first (release order).
    fn send_whole(
        &mut self,
        now: u64,
        release_ns: u64,
        frame: &[u8],
        whole: Whole,
    ) -> Result<(), String> {
        let n = u64::from(whole.wire_frames);
        let lateness = now.saturating_sub(release_ns);
        if self.max_lag_ns.is_some_and(|m| lateness > m) {
            self.local_late += n;
            return Ok(());
        }
        self.emit_pending()?;
        let sent = send_super(&mut *self.tx, frame, whole.offload)?;
        self.count_super(&sent, n);
        if sent.whole {
            self.local_whole += n;
        }
        let _ = self.lateness.record_n(lateness.max(1), n);
        Ok(())
    }

    /// Sends (or drops as late) one frame due now; an error stops the stage.
    /// `checksummed`: its TCP checksum was computed by the live stage and
    /// the frame not changed since, so coalescing need not verify it.
    pub(super) fn send(
        &mut self,
        now: u64,
        release_ns: u64,
        frame: &[u8],
        copy: bool,
        checksummed: bool,
    ) -> Result<(), String> {
        let lateness = now.saturating_sub(release_ns);
        if self.max_lag_ns.is_some_and(|m| lateness > m) {
            if !copy {
                self.local_late += 1;
                self.discard(frame);
            }
            return Ok(());
        }
        if let Some(p) = self.coalesce.as_mut().filter(|_| !copy) {
            match p.offer(frame, release_ns, checksummed) {
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
            self.local_sent_bytes += frame.len() as u64;
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
        let n = releases.len() as u64;
        let sent = send_super(&mut *self.tx, frame, offload)?;
        let now = clock::now_ns();
        for &r in releases {
            let _ = self.lateness.record(now.saturating_sub(r).max(1));
        }
        self.count_super(&sent, n);
        Ok(())
    }

    /// Counts the `n` wire frames of a super-frame sent (and notes frames
    /// queued in the ring, to be flushed).
    fn count_super(&mut self, sent: &SuperSent, n: u64) {
        // Held frames leave also from `release_held` (before a wait, or an
        // idle park whose timeout depends on this flag): unflagged, their
        // counts were never published and the run showed them in flight.
        self.changed = true;
        self.queued |= sent.queued;
        if sent.whole {
            self.local_super_frames += 1;
            self.local_coalesced += n;
        }
        let too_big = sent.too_big.min(n);
        self.local_sent += n - too_big;
        self.local_sent_bytes += sent.bytes;
        self.local_too_big += too_big;
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

    /// Hands a frame not sent back to the port, and makes the next
    /// [`OutputState::flush`] reach the kernel: a port's discard may be a
    /// verdict waiting in its batch (host mode's NF_DROP), which would
    /// otherwise wait for the next frame sent, keeping the packet held.
    fn discard(&mut self, frame: &[u8]) {
        self.tx.tx_discard(frame);
        self.queued = true;
    }

    pub(super) fn flush(&mut self) -> Result<(), String> {
        if self.queued {
            self.queued = false;
            self.tx.tx_flush().map_err(|e| format!("send: {e}"))?;
        }
        Ok(())
    }

    pub(super) fn publish(&mut self, control: &Control) {
        self.changed = false;
        let tx_errors = self.tx.tx_errors();
        let mut shared = control.output.lock().expect("the lock holders never panic");
        shared.sent = self.local_sent;
        shared.sent_bytes = self.local_sent_bytes;
        shared.copies_sent = self.local_copies;
        shared.late = self.local_late;
        shared.flushed = self.local_flushed;
        shared.too_big = self.local_too_big;
        shared.tx_errors = tx_errors;
        shared.tx_wakeups = self.wakeups;
        shared.spin = super::SpinStats {
            send_lead_ns: self.tx.send_lead_ns(),
            ..self.spin
        };
        shared.coalesced = self.local_coalesced;
        shared.super_frames = self.local_super_frames;
        shared.whole = self.local_whole;
        shared.lateness.add(&self.lateness).expect("same bounds");
        self.lateness.reset();
    }
}

#[derive(Clone, Copy)]
pub(super) struct OutputConfig {
    pub spin_ns: u64,
    /// Spin even while every core is taken (see `wait::CoreWatch`).
    pub spin_always: bool,
    /// The share of a core the thread may spend spinning, ppm (see `wake`).
    pub spin_budget_ppm: u32,
    pub max_lag_ns: Option<u64>,
    pub reorders: bool,
    /// With `reorders`: the producer counts its out-of-order records (see [`Source`]).
    pub sorted_runs: bool,
    /// Coalesce TCP wire frames due within this window into super-frames
    /// (when the port can send them); `None`: off. See [`super::coalesce`].
    pub coalesce_window_ns: Option<u64>,
}

/// One direction's frames waiting to leave (its delay line and reorder heap)
/// and the port they leave by, behind one lock: whoever holds it is the line's
/// only consumer and the port's only sender (see the module doc).
pub(super) struct Outlet {
    inner: Mutex<OutletInner>,
    control: Arc<Control>,
}

pub(super) struct OutletInner {
    pub(super) st: OutputState,
    pub(super) src: Source,
    /// When the stage last published this direction's counts from here.
    last_publish_ns: u64,
    /// When the output thread last found nothing to send ([`idle`]).
    last_idle_ns: u64,
}

impl OutletInner {
    /// The instant the next frame is to be handed over (its release less the
    /// port's send lead, [`TxPort::send_lead_ns`]), if any is waiting. Every
    /// sender asks here, so each compares its clock with the same instants.
    pub(super) fn next_release(&mut self) -> Option<u64> {
        self.src.set_lead_ns(self.st.tx.send_lead_ns());
        self.src.next_release()
    }
}

/// What [`Outlet::send_due_with`] left waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Left {
    /// The output thread holds the outlet: it is awake, and sends what is due.
    Busy,
    /// Nothing.
    Empty,
    /// Frames, the earliest released at this instant (already due when the
    /// call's `max_frames` ran out).
    Next(u64),
    /// Frames, the earliest released at this instant a super-frame stored
    /// whole that stands for more wire frames than the call's `max_frames`:
    /// bulk traffic, the output thread's to send.
    Bulk(u64),
}

impl Outlet {
    pub fn new(
        control: Arc<Control>,
        consumer: Consumer,
        tx: Box<dyn TxPort>,
        cfg: &OutputConfig,
    ) -> Arc<Outlet> {
        let src = Source::new(consumer, cfg, &control);
        Arc::new(Outlet {
            inner: Mutex::new(OutletInner {
                st: OutputState::new(tx, cfg.max_lag_ns, cfg.coalesce_window_ns),
                src,
                last_publish_ns: clock::now_ns(),
                last_idle_ns: 0,
            }),
            control,
        })
    }

    pub fn control(&self) -> &Arc<Control> {
        &self.control
    }

    /// For the output thread: waits for the outlet (the live stage holds it
    /// for one send call at most).
    pub(super) fn lock(&self) -> MutexGuard<'_, OutletInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`Outlet::send_due_with`] without `one_whole` (the tests' stage).
    #[cfg(test)]
    pub fn send_due(
        &self,
        now: &mut dyn FnMut() -> u64,
        max_frames: usize,
    ) -> Result<(Left, usize), String> {
        self.send_due_with(now, max_frames, false)
    }

    /// For the live stage: sends the frames due by `now()` (at most
    /// `max_frames` wire frames, in release order; a super-frame stored
    /// whole counts the wire frames it stands for, and one with more than
    /// are left is left whole to the output thread), unless the output
    /// thread holds the outlet, and says what is left and how many wire
    /// frames it took. Never waits for the lock or a release.
    ///
    /// With `one_whole`, one super-frame stored whole and due is sent too
    /// whatever its wire frames (once per call): for a stage whose output
    /// thread is parked, which would otherwise be woken for every
    /// super-frame of a bulk flow (a wake-up of the other core per 64 KiB
    /// cost more than the send: bulk TCP unimpaired gained 9-24 % in each
    /// of five alternated rounds, docs/numbers.md).
    pub fn send_due_with(
        &self,
        now: &mut dyn FnMut() -> u64,
        max_frames: usize,
        mut one_whole: bool,
    ) -> Result<(Left, usize), String> {
        let mut g = match self.inner.try_lock() {
            Ok(g) => g,
            Err(TryLockError::WouldBlock) => return Ok((Left::Busy, 0)),
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
        };
        let inner = &mut *g;
        let mut sent = 0;
        let left = loop {
            let Some(release_ns) = inner.next_release() else {
                break Left::Empty;
            };
            let now_ns = now();
            let frames = inner.src.next_wire_frames();
            if frames > max_frames {
                if !one_whole || release_ns > now_ns {
                    break Left::Bulk(release_ns);
                }
                one_whole = false;
            } else if release_ns > now_ns || sent + frames > max_frames {
                break Left::Next(release_ns);
            }
            inner.st.send_next(
                now_ns,
                &mut inner.src,
                &self.control.flush,
                &self.control.held,
            )?;
            sent += frames;
        };
        // A super-frame being gathered stays held only while a frame is
        // waiting that may join it: whoever sends that frame (the stage, which
        // takes on the release, or the output thread it wakes, see
        // `live::Outputs::hand_out`) sends or releases it; with nothing
        // waiting it leaves now.
        let next = match left {
            Left::Next(r) | Left::Bulk(r) => Some(r),
            _ => None,
        };
        inner.st.flush_before(next)?;
        self.control
            .output_at_ns
            .store(next.unwrap_or(u64::MAX), Ordering::Relaxed);
        if sent > 0 {
            let now_ns = now();
            if now_ns.wrapping_sub(inner.last_publish_ns) > PUBLISH_NS {
                inner.last_publish_ns = now_ns;
                inner.st.publish(&self.control);
            }
        }
        Ok((left, sent))
    }

    /// For the live stage, after it sent frames while the output thread is
    /// asleep (parked with its counts published): publishes the counts
    /// itself when the last publication is at least [`STAGE_PUBLISH_NS`]
    /// old, so that the output thread is not woken only to publish them.
    /// Returns whether the counts are published (false: the stage wakes the
    /// output thread for them, as it did before).
    pub(super) fn publish_for_asleep(&self, now_ns: u64) -> bool {
        let Ok(mut g) = self.inner.try_lock() else {
            return false;
        };
        if !g.st.changed {
            return true;
        }
        if now_ns.saturating_sub(g.last_publish_ns) < STAGE_PUBLISH_NS {
            return false;
        }
        g.last_publish_ns = now_ns;
        g.st.publish(&self.control);
        true
    }
}

/// The least time between two publications of an asleep output thread's
/// counts by the live stage ([`Outlet::publish_for_asleep`]): sparse traffic
/// publishes each packet's counts from the stage (a merge of microseconds)
/// instead of waking the output thread for them; at higher rates the stage
/// wakes it as before, and it publishes every [`PUBLISH_NS`].
pub(super) const STAGE_PUBLISH_NS: u64 = 1_000_000;

// Kept whole: the stage's per-frame hot loop; `idle` and `wait_until` are its cold branches.
pub(super) fn output_stage(outlet: Arc<Outlet>, cfg: OutputConfig, mut realtime: Option<Realtime>) {
    clock::set_timer_slack_ns(1);
    let control = outlet.control.clone();
    let mut wake = WakeEstimate::default();
    // Sleeps longer than ONE_SLEEP_NS apart: whether a long wait needs two.
    let mut long = WakeEstimate::default();
    let spin_ns = cfg.spin_ns;
    let mut budget =
        SpinBudget::watching_cores(clock::now_ns(), !cfg.spin_always, cfg.spin_budget_ppm);
    control
        .output_wake_ns
        .store(wake.wake_ns(spin_ns), Ordering::Relaxed);
    let mut wakeups = 0u64;
    // Host mode: a deleted pipe's packets get their verdicts at once (the
    // kernel holds them), seen within MAX_SLEEP_NS while any record waits.
    let mut flushes_seen = 0u64;
    while !control.stop.load(Ordering::Acquire) {
        let mut g = outlet.lock();
        let inner = &mut *g;
        inner.st.wakeups = wakeups;
        if control.held.is_bounded() && control.flush.added() != flushes_seen {
            flushes_seen = control.flush.added();
            inner.src.end_flushed(&mut inner.st, &control.flush);
        }
        let next = inner.next_release();
        // One relaxed store per frame; the input stage reads it once per batch.
        control
            .output_at_ns
            .store(next.unwrap_or(u64::MAX), Ordering::Relaxed);
        let now = clock::now_ns();
        // Merging the histogram costs microseconds: do it when the next packet
        // is not due soon, or at the latest every PUBLISH_MAX_NS under
        // continuous traffic, so that it never delays a send.
        let since = now.wrapping_sub(inner.last_publish_ns);
        let slack = next.is_none_or(|r| r > now + spin_ns + 200_000);
        if (since > PUBLISH_NS && slack) || since > PUBLISH_MAX_NS {
            inner.last_publish_ns = now;
            inner.st.spin = budget.report(&wake, spin_ns);
            inner.st.publish(&control);
        }
        let Some(release_ns) = next else {
            // What it learnt goes with the counts idle publishes; while busy,
            // with its own publications (above), not with every frame.
            inner.st.spin = budget.report(&wake, spin_ns);
            let spin = budget.spin_ns(&wake, spin_ns);
            control.waker.set_lead_ns(lead_ns(spin));
            match idle(&control, g, realtime.as_mut(), &mut wakeups, &mut long) {
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
            if let Err(e) = inner.st.flush_before(Some(release_ns)) {
                control.fail(e);
                break;
            }
            control.output_ready_ns.store(release_ns, Ordering::Relaxed);
            // The live stage may send while this thread waits.
            drop(g);
            if let Some(rt) = realtime.as_mut() {
                // Failing to return to SCHED_FIFO costs precision, not packets.
                let _ = rt.wait_mode();
            }
            let spin = budget.allowed_spin_ns(now, &wake, spin_ns);
            if wait_until(
                &outlet,
                release_ns,
                now,
                spin,
                &mut wake,
                &mut long,
                &mut budget,
            ) {
                wakeups += 1;
                control
                    .output_wake_ns
                    .store(wake.wake_ns(spin_ns), Ordering::Relaxed);
            }
            budget.tick_waiting(now, release_ns, &wake, spin_ns);
            continue;
        }
        control.output_ready_ns.store(now, Ordering::Relaxed);
        if now - release_ns > BEHIND_NS {
            if let Some(rt) = realtime.as_mut() {
                rt.busy(now);
            }
        }
        if let Err(e) = inner
            .st
            .send_next(now, &mut inner.src, &control.flush, &control.held)
        {
            control.fail(e);
            break;
        }
    }
    let mut g = outlet.lock();
    g.st.wakeups = wakeups;
    g.st.spin = budget.report(&wake, spin_ns);
    let _ = g.st.flush_before(None);
    control.output_at_ns.store(u64::MAX, Ordering::Relaxed);
    g.st.publish(&control);
}

/// Nothing to send: hands over what is queued, publishes counts not yet
/// published when it was last idle [`IDLE_PUBLISH_NS`] ago or more, then
/// sleeps on its waker until the instant the input stage armed for a frame
/// it does not send itself (the frame's release less this thread's lead), a
/// send of the stage while the counts are published (it wakes an asleep
/// output thread), a stop, or the next publication of counts still
/// unpublished ([`PUBLISH_NS`]): idle, the thread does not wake. Returns
/// false once the line is closed and empty.
fn idle(
    control: &Control,
    mut g: MutexGuard<'_, OutletInner>,
    realtime: Option<&mut Realtime>,
    wakeups: &mut u64,
    long: &mut WakeEstimate,
) -> Result<bool, String> {
    g.st.flush_before(None)?;
    if g.src.consumer.is_finished() {
        return Ok(false);
    }
    if let Some(rt) = realtime {
        let _ = rt.idle_mode();
    }
    control.output_ready_ns.store(u64::MAX, Ordering::Relaxed);
    // Sparse traffic: publish now rather than wake once more only to publish
    // (a packet every 100 ms cost that wake-up each, on top of its release).
    let now = clock::now_ns();
    if g.st.changed && now.wrapping_sub(g.last_idle_ns) >= IDLE_PUBLISH_NS {
        g.last_publish_ns = now;
        g.st.publish(control);
    }
    g.last_idle_ns = now;
    // Counts not yet published wait PUBLISH_NS at most; with none, the thread
    // sleeps until a push, a stop or a send of the live stage wakes it.
    let publish_in_ns = g.st.changed.then(|| {
        (g.last_publish_ns + PUBLISH_NS + 1)
            .saturating_sub(clock::now_ns())
            .max(1)
    });
    // Under the lock: a send of the stage after it sees the flag.
    control
        .output_asleep
        .store(publish_in_ns.is_none(), Ordering::Relaxed);
    control.output_parked.store(true, Ordering::Release);
    // Re-check after announcing the park, so a push in between is not missed.
    // The store above and the load in `peek` need a full fence between them
    // (x86 lets a load pass an earlier store), matching the one the input stage
    // puts between its push and its look at `output_parked`; without both, each
    // side can miss the other and the stage sleeps `MAX_SLEEP_NS` (10 ms) with
    // a frame due: late drops right after start. (The heap is empty: this
    // thread found no frame, under the lock.)
    std::sync::atomic::fence(Ordering::SeqCst);
    let empty = g.src.consumer.peek().is_none();
    drop(g);
    if empty {
        // A frame stored for later arms the waker's timer for its release
        // less the lead: this thread wakes once for it, not also when it is
        // stored (see `waker`), after a long sleep, which is learnt from.
        if let Woke::Timer(at_ns) = control.waker.wait(publish_in_ns, || false) {
            if at_ns.saturating_sub(now) > ONE_SLEEP_NS {
                long.observe(clock::now_ns().saturating_sub(at_ns));
            }
        }
        *wakeups += 1;
    }
    control.output_asleep.store(false, Ordering::Relaxed);
    control.output_parked.store(false, Ordering::Release);
    Ok(true)
}

/// Parks until `spin` before `release_ns` (at most [`MAX_SLEEP_NS`]), or
/// spins to it when it is that close. Returns true when it waited parked (or
/// found a frame due earlier than `release_ns`, which it then handles).
fn wait_until(
    outlet: &Outlet,
    release_ns: u64,
    now: u64,
    spin: u64,
    wake: &mut WakeEstimate,
    long: &mut WakeEstimate,
    budget: &mut SpinBudget,
) -> bool {
    let wait = release_ns - now;
    let slept = wait > spin;
    outlet.control.waker.set_lead_ns(lead_ns(spin));
    if slept {
        let approach = !long.covered_by(spin);
        let (target, last) = wait_target(now, release_ns, spin, MAX_SLEEP_NS, approach);
        if park_until(outlet, release_ns, target) {
            learn(wake, long, now, target, clock::now_ns(), last);
        }
    } else {
        while clock::now_ns() < release_ns {
            std::hint::spin_loop();
        }
        budget.spun(release_ns - now);
    }
    slept
}

/// Parks until `target_ns`, waiting for `release_ns`, unless a frame due
/// before it is already stored; returns whether it parked.
///
/// On its waker, so that the live stage can wake it for a frame it stores
/// with an earlier release that is this thread's to send (the stage arms
/// the waker for that release less the lead when it is before `output_waits_ns`,
/// `live::Outputs::hand_out`), instead of the thread waking every 200 µs to
/// look: twenty-five wake-ups per packet of a 5 ms delay. `output_parked`
/// stays false: to the stage this thread is awake, waiting for its release,
/// as when it slept. The announce-fence-recheck pairs with the stage's
/// push-fence-look, as in [`idle`].
fn park_until(outlet: &Outlet, release_ns: u64, target_ns: u64) -> bool {
    let control = outlet.control();
    control.output_waits_ns.store(release_ns, Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::SeqCst);
    let earlier = outlet.lock().next_release().is_some_and(|r| r < release_ns);
    let now = clock::now_ns();
    let parked = !earlier && target_ns > now && !control.stop.load(Ordering::Acquire);
    if parked {
        control.waker.wait(Some(target_ns - now), || false);
    }
    control.output_waits_ns.store(u64::MAX, Ordering::Relaxed);
    parked
}

#[cfg(test)]
mod tests;

//! The output stage of a bridge of several interface pairs (`linkem bridge
//! --pair`, [`super::LiveGroup`]): one thread sends for a set of directions
//! (every pair's a->b, or every pair's b->a) in place of one thread per
//! direction, so that the threads of a bridge do not grow with its pairs.
//!
//! Each turn visits every direction and sends the frames due by now, at most
//! [`TURN_FRAMES`] of one direction per turn: a busy link holds the others
//! back by at most that many sends. Frames of different pairs are different
//! links, so only each direction's own release order matters, and each
//! direction keeps it ([`Source`]). Then, with nothing due:
//! - the earliest release still ahead over all directions is waited for: a
//!   park (with every direction's `output_parked` set, so the live stage's
//!   push of a frame for any direction wakes the thread at once, which a
//!   timed sleep would not) until the release less the learnt wake-up
//!   overshoot, then a spin to it, within the spin budget, as the
//!   one-direction stage does (`super::output`);
//! - with nothing queued at all, a park ended by the live stage's first push
//!   (or a stop), or, while counts are not yet published, by their
//!   publication ([`PUBLISH_NS`]; published at once when the thread was
//!   last idle [`super::output::IDLE_PUBLISH_NS`] ago or more): an idle
//!   bridge's output stages do not wake, whatever its number of pairs.
//!
//! Per frame, sending, lateness, max-lag, flushing, coalescing (held frames
//! leave once a direction has nothing more due that may join them,
//! [`super::output::OutputState::release_held`]) and the counts are those of the one-direction
//! stage ([`super::output::OutputState`]). Each direction is an [`Outlet`],
//! locked by this thread only while it sends that direction's frames, so the
//! live stage sends a direction's frames due before this thread could wake
//! (as for one pair, `super::output`): this thread tells every direction the
//! release it is awake for (`output_ready_ns`) and its learnt wake-up
//! (`output_wake_ns`). The thread's wake-ups are
//! reported as each of its directions' `tx_wakeups` (as the live stage's are
//! as each direction's `rx_wakeups`).

use super::output::{
    Outlet, OutputConfig, IDLE_PUBLISH_NS, MAX_SLEEP_NS, PUBLISH_MAX_NS, PUBLISH_NS,
};
use super::wait::{Realtime, SpinBudget, WakeEstimate, BEHIND_NS};
use super::wake::{lead_ns, learn, wait_target};
use super::Control;
use super::SpinStats;
use crate::clock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Frames of one direction sent per turn at most before the next direction's.
pub(super) const TURN_FRAMES: usize = 64;

/// What one turn over the directions found.
struct Turn {
    /// A frame was sent (or dropped late or flushed): look again at once.
    worked: bool,
    /// A frame was due that this turn left for the next (`TURN_FRAMES`).
    more_due: bool,
    /// The earliest release still ahead.
    earliest_ns: Option<u64>,
    /// A frame left more than [`BEHIND_NS`] after its release.
    behind: bool,
}

/// Runs until `stop`: sends the frames of `dirs` at their release times.
pub(super) fn output_group(
    stop: Arc<AtomicBool>,
    dirs: Vec<Arc<Outlet>>,
    cfg: OutputConfig,
    mut realtime: Option<Realtime>,
) {
    clock::set_timer_slack_ns(1);
    let mut wake = WakeEstimate::default();
    // Sleeps longer than ONE_SLEEP_NS apart (see `output::wait_until`).
    let mut long = WakeEstimate::default();
    let mut wakeups = 0u64;
    let mut last_publish = clock::now_ns();
    let mut last_idle = 0u64;
    let mut budget =
        SpinBudget::watching_cores(last_publish, !cfg.spin_always, cfg.spin_budget_ppm);
    tell_wake(&dirs, wake.wake_ns(cfg.spin_ns));
    while !stop.load(Ordering::Acquire) {
        // A direction whose send failed stops (its pair stops with it, see
        // `live`); the others go on.
        let turn = match send_due(&dirs) {
            Ok(t) => t,
            Err((i, e)) => {
                dirs[i].control().fail(e);
                continue;
            }
        };
        let now = clock::now_ns();
        if turn.behind {
            if let Some(rt) = realtime.as_mut() {
                rt.busy(now);
            }
        }
        // Merging the histograms costs microseconds per direction: done when
        // nothing is due soon, or at the latest every PUBLISH_MAX_NS.
        let since = now.wrapping_sub(last_publish);
        let slack = !turn.worked
            && turn
                .earliest_ns
                .is_none_or(|r| r > now + cfg.spin_ns + 200_000);
        if (since > PUBLISH_NS && slack) || since > PUBLISH_MAX_NS {
            last_publish = now;
            publish(&dirs, wakeups, budget.report(&wake, cfg.spin_ns), false);
        }
        if turn.worked || turn.more_due {
            continue;
        }
        // Hand over what is queued before waiting, so it is not held back.
        if let Err(e) = flush_all(&dirs) {
            e.0.fail(e.1);
            continue;
        }
        if let Some(rt) = realtime.as_mut() {
            // Failing to return to SCHED_FIFO costs precision, not packets.
            let _ = rt.wait_mode();
        }
        let Some(release_ns) = turn.earliest_ns else {
            if dirs
                .iter()
                .all(|d| d.control().has_failed() || d.lock().src.consumer.is_finished())
            {
                break;
            }
            // Sparse traffic publishes as it goes idle (see `output::idle`).
            if now.wrapping_sub(last_idle) >= IDLE_PUBLISH_NS {
                last_publish = now;
                publish(&dirs, wakeups, budget.report(&wake, cfg.spin_ns), true);
            }
            last_idle = now;
            tell_lead(&dirs, lead_ns(budget.spin_ns(&wake, cfg.spin_ns)));
            park_until(&dirs, None, last_publish + PUBLISH_NS + 1);
            wakeups += 1;
            continue;
        };
        let spin = budget.allowed_spin_ns(now, &wake, cfg.spin_ns);
        tell_lead(&dirs, lead_ns(spin));
        let wait = release_ns.saturating_sub(now);
        if wait > spin {
            let approach = !long.covered_by(spin);
            let (target, last) = wait_target(now, release_ns, spin, MAX_SLEEP_NS, approach);
            if park_until(&dirs, Some(release_ns), target) {
                learn(&mut wake, &mut long, now, target, clock::now_ns(), last);
                if last {
                    tell_wake(&dirs, wake.wake_ns(cfg.spin_ns));
                }
            }
            wakeups += 1;
        } else {
            tell_ready(&dirs, release_ns);
            while clock::now_ns() < release_ns {
                std::hint::spin_loop();
            }
            budget.spun(wait);
        }
        budget.tick_waiting(now, release_ns, &wake, cfg.spin_ns);
    }
    for d in &dirs {
        let _ = d.lock().st.flush_before(None);
    }
    for d in &dirs {
        d.control().output_at_ns.store(u64::MAX, Ordering::Relaxed);
    }
    publish(&dirs, wakeups, budget.report(&wake, cfg.spin_ns), false);
    // The counts are final: the sockets close, all at once.
    let ports: Vec<Box<dyn crate::port::TxPort>> = dirs
        .iter()
        .map(|d| std::mem::replace(&mut d.lock().st.tx, Box::new(crate::port::ClosedTx)))
        .collect();
    crate::port::close_all(ports);
}

/// Tells the live stage how long before a release to wake this thread (see
/// `waker`); its directions share one waker.
fn tell_lead(dirs: &[Arc<Outlet>], lead_ns: u64) {
    if let Some(d) = dirs.first() {
        d.control().waker.set_lead_ns(lead_ns);
    }
}

/// Tells every direction the thread's learnt wake-up (see `output::who_sends`).
fn tell_wake(dirs: &[Arc<Outlet>], wake_ns: u64) {
    for d in dirs {
        d.control().output_wake_ns.store(wake_ns, Ordering::Relaxed);
    }
}

/// Tells every direction the release the thread is awake for (`u64::MAX`:
/// none, parked until a push): the live stage sends a frame due sooner itself.
fn tell_ready(dirs: &[Arc<Outlet>], ready_ns: u64) {
    for d in dirs {
        d.control()
            .output_ready_ns
            .store(ready_ns, Ordering::Relaxed);
    }
}

/// Sends what is due in every direction (at most [`TURN_FRAMES`] each); an
/// error names the direction's index.
fn send_due(dirs: &[Arc<Outlet>]) -> Result<Turn, (usize, String)> {
    let mut turn = Turn {
        worked: false,
        more_due: false,
        earliest_ns: None,
        behind: false,
    };
    for (i, d) in dirs.iter().enumerate() {
        let control = d.control();
        if control.has_failed() {
            continue;
        }
        let mut g = d.lock();
        let inner = &mut *g;
        let mut sent = 0;
        loop {
            let next = inner.next_release();
            // One relaxed store per frame; the live stage reads it once per batch.
            control
                .output_at_ns
                .store(next.unwrap_or(u64::MAX), Ordering::Relaxed);
            let now = clock::now_ns();
            let Some(release_ns) = next.filter(|&r| r <= now) else {
                // Nothing more due here: what the coalescer holds leaves
                // unless the next frame may still join it (as in `output`).
                inner.st.release_held(next).map_err(|e| (i, e))?;
                if let Some(r) = next {
                    turn.earliest_ns = Some(turn.earliest_ns.map_or(r, |e| e.min(r)));
                }
                break;
            };
            if sent == TURN_FRAMES {
                turn.more_due = true;
                break;
            }
            // Awake and sending: the stage leaves this direction's due frames here.
            control.output_ready_ns.store(now, Ordering::Relaxed);
            turn.behind |= now - release_ns > BEHIND_NS;
            inner
                .st
                .send_next(now, &mut inner.src, &control.flush, &control.held)
                .map_err(|e| (i, e))?;
            sent += 1;
            turn.worked = true;
        }
    }
    Ok(turn)
}

fn flush_all(dirs: &[Arc<Outlet>]) -> Result<(), (Arc<Control>, String)> {
    for d in dirs.iter().filter(|d| !d.control().has_failed()) {
        d.lock().st.flush().map_err(|e| (d.control().clone(), e))?;
    }
    Ok(())
}

/// Publishes every direction's counts, or (`changed_only`) those of the
/// directions that handled frames since their last publication.
fn publish(dirs: &[Arc<Outlet>], wakeups: u64, spin: SpinStats, changed_only: bool) {
    for d in dirs {
        let mut g = d.lock();
        if changed_only && !g.st.changed {
            continue;
        }
        g.st.wakeups = wakeups;
        g.st.spin = spin;
        g.st.publish(d.control());
    }
}

/// Parks until `target_ns` or the live stage's next push for any direction.
/// `waiting_for`: the release the caller waits for (None: nothing queued;
/// then `target_ns` is when unpublished counts are due, and with none the
/// park has no timeout, see `output::idle`). Returns false when it did not
/// park, because a frame came meanwhile that is due before what the caller
/// waits for.
fn park_until(dirs: &[Arc<Outlet>], waiting_for: Option<u64>, target_ns: u64) -> bool {
    tell_ready(dirs, waiting_for.unwrap_or(u64::MAX));
    for d in dirs {
        d.control().output_parked.store(true, Ordering::Release);
    }
    // Re-check after announcing the park, so a push in between is not missed:
    // the fence pairs with the live stage's between its push and its look at
    // `output_parked` (see `output::idle`).
    std::sync::atomic::fence(Ordering::SeqCst);
    let mut changed = false;
    let earlier = dirs.iter().filter(|d| !d.control().has_failed()).any(|d| {
        let mut g = d.lock();
        if waiting_for.is_none() {
            changed |= g.st.changed;
            // Under the lock: a send of the stage after it sees the flag.
            d.control().output_asleep.store(true, Ordering::Relaxed);
        }
        match g.next_release() {
            Some(r) => waiting_for.is_none_or(|w| r < w),
            None => false,
        }
    });
    let forever = waiting_for.is_none() && !changed;
    if !forever {
        for d in dirs {
            d.control().output_asleep.store(false, Ordering::Relaxed);
        }
    }
    let now = clock::now_ns();
    let parked = !earlier && (forever || target_ns > now);
    if parked {
        // Every direction of this thread shares its waker (see `waker`).
        let timeout_ns = (!forever).then(|| target_ns - now);
        if let Some(d) = dirs.first() {
            d.control().waker.wait(timeout_ns, || false);
        }
    }
    for d in dirs {
        d.control().output_asleep.store(false, Ordering::Relaxed);
        d.control().output_parked.store(false, Ordering::Release);
    }
    parked
}

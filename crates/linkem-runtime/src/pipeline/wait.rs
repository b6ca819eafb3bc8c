//! How the output stage waits for a release time: sleep far, spin near, learn
//! how late sleeps wake, cap the share of time spent spinning, and hold
//! SCHED_FIFO only while waiting.

/// Default for [`super::DirectionOptions::spin_ns`], the most the output thread
/// spins before a release time. It spins only as long as a timed sleep has
/// recently been seen to overshoot (learnt per thread, see `WakeEstimate`):
/// on a quiet machine a few µs, on a loaded VM 20-100 µs. Lower it to save CPU
/// at the cost of precision; on a machine with cores to spare, raise it and pin
/// threads.
pub const DEFAULT_SPIN_NS: u64 = 200_000;
/// The least the output thread spins, so that a fast wake-up still has room.
pub(super) const MIN_SPIN_NS: u64 = 3_000;

/// How late a timed sleep of this thread wakes: a maximum over recent sleeps
/// that decays by 1/64 per sleep, so one long preemption is forgotten after a
/// few hundred sleeps while a steady overshoot keeps the spin long enough.
#[derive(Debug, Clone, Copy)]
pub(super) struct WakeEstimate {
    pub overshoot_ns: u64,
}

impl WakeEstimate {
    pub fn spin_ns(&self, max_ns: u64) -> u64 {
        (self.overshoot_ns + self.overshoot_ns / 4 + MIN_SPIN_NS).min(max_ns)
    }

    pub fn observe(&mut self, overshoot_ns: u64) {
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
pub(super) struct SpinBudget {
    window_start_ns: u64,
    pub spun_ns: u64,
    pub frugal: bool,
}

const SPIN_WINDOW_NS: u64 = 10_000_000;

impl SpinBudget {
    pub fn new(now: u64) -> Self {
        SpinBudget {
            window_start_ns: now,
            spun_ns: 0,
            frugal: false,
        }
    }

    pub fn tick(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.window_start_ns);
        if elapsed >= SPIN_WINDOW_NS {
            self.frugal = self.spun_ns * 2 > elapsed;
            self.window_start_ns = now;
            self.spun_ns = 0;
        }
    }
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
pub(super) const BEHIND_NS: u64 = 200_000;

/// How long a stage must stay busy (behind, or with a full batch every time)
/// before it leaves SCHED_FIFO: see [`Realtime`].
pub(super) const SUSTAINED_BUSY_NS: u64 = 1_000_000;

/// SCHED_FIFO for a stage only while it waits (and through short bursts).
///
/// Real-time priority is what makes a wake-up punctual on a loaded machine
/// (a woken SCHED_FIFO thread preempts ordinary ones at once, instead of
/// waiting for its turn among them, which with a few busy tasks per core is
/// milliseconds), but a real-time thread that is continuously busy (a backlog
/// of due packets, or receive batches that are always full) never blocks, and
/// starves the softirq and ksoftirqd work that delivers and receives the very
/// packets it handles: on two cores the whole path then slows to a fraction of
/// its rate. So a stage that has been busy without a pause for
/// [`SUSTAINED_BUSY_NS`] drops to ordinary scheduling, and goes back to
/// SCHED_FIFO when it next has to wait, at the cost of one system call per
/// change. A short hiccup (a preemption, a burst) is caught up at real-time
/// priority instead, which is what keeps the lateness tail short.
///
/// With `timed_only`, a stage waiting for traffic rather than for an instant
/// (the output stage parked, the live stage with no release or event to keep)
/// runs at ordinary priority too ([`Realtime::idle_mode`]): a flood from
/// a host on the same cores then wakes no real-time thread per arrival, which
/// would preempt the hosts each time.
pub(super) struct Realtime {
    priority: i32,
    timed_only: bool,
    on: bool,
    busy_since_ns: Option<u64>,
}

impl Realtime {
    pub fn new(priority: i32, timed_only: bool) -> Self {
        Realtime {
            priority,
            timed_only,
            on: false,
            busy_since_ns: None,
        }
    }

    /// The stage waits for traffic, not for an instant: under SCHED_FIFO
    /// unless `timed_only`.
    pub fn idle_mode(&mut self) -> Result<(), String> {
        if !self.timed_only {
            return self.wait_mode();
        }
        self.busy_since_ns = None;
        if self.on {
            set_ordinary()?;
            self.on = false;
        }
        Ok(())
    }

    pub fn wait_mode(&mut self) -> Result<(), String> {
        self.busy_since_ns = None;
        if !self.on {
            set_realtime(self.priority)?;
            self.on = true;
        }
        Ok(())
    }

    /// The stage found work waiting for it at `now_ns` (a late packet, a full batch).
    pub fn busy(&mut self, now_ns: u64) {
        let since = *self.busy_since_ns.get_or_insert(now_ns);
        if self.on && now_ns.saturating_sub(since) >= SUSTAINED_BUSY_NS && set_ordinary().is_ok() {
            self.on = false;
        }
    }
}

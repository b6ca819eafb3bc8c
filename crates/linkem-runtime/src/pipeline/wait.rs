//! How the output stage waits for a release time: sleep far, spin near, learn
//! how late sleeps wake, cap the share of time spent spinning, and hold
//! SCHED_FIFO only while waiting; and how long the live stage lingers after
//! frames leave before it sleeps ([`Linger`]).

/// Default for [`super::DirectionOptions::spin_ns`], the most the output thread
/// spins before a release time. It spins only as long as a timed sleep has
/// recently been seen to overshoot (a quantile learnt per thread within its
/// `--spin-budget`, see `WakeEstimate`):
/// on a quiet machine a few µs, on a loaded VM 20-100 µs. Lower it to save CPU
/// at the cost of precision; on a machine with cores to spare, raise it and pin
/// threads.
pub const DEFAULT_SPIN_NS: u64 = 200_000;
pub(super) use super::wake::{SpinLadder, SpinStats, WakeEstimate, MIN_SPIN_NS};

/// Keeps a stage from spinning away the machine: when releases come so close
/// together that every wait is a spin (tens of kpps, with a long learnt
/// spin), a real-time thread would hold its core without pause and starve
/// the input stage and the kernel's packet processing on a small machine.
/// An output thread's spin covers fewer of its wake-ups once a window spent
/// more than its budget spinning ([`SpinLadder`], `--spin-budget`), and it
/// also looks at the machine's cores as each window ends ([`CoreWatch`]) and
/// spins as little as it can while every one is taken. The live stage, which
/// spins only to its own rare timed events and lingers, keeps a simpler rule:
/// a window more than half spent spinning makes the next one `frugal`.
pub(super) struct SpinBudget {
    window_start_ns: u64,
    pub spun_ns: u64,
    pub frugal: bool,
    /// Of `spun_ns`, what went to lingering in this window ([`Linger`]).
    lingered_ns: u64,
    /// The output thread's look at the cores (none: spin regardless).
    cores: Option<CoreWatch>,
    /// Every core was taken when the last window ended.
    all_taken: bool,
    /// The output thread's budget, and the quantile of wake-ups its spin covers.
    pub ladder: SpinLadder,
    /// Spun in the windows that ended, for the stats.
    pub spun_total_ns: u64,
    /// What an output thread may still spin: it grows by the budget's
    /// share of the time passed, up to [`SPIN_CREDIT_WINDOWS`] windows'
    /// worth, and every spin is paid from it ([`SpinBudget::allowed_spin_ns`]).
    credit: Credit,
    /// A spin of this window was cut short for want of credit.
    starved: bool,
    /// Releases waited for in this window (the ladder's prediction).
    waits: u64,
    /// The release the last wait was for: a release waited for in steps
    /// (an approach, the sleep to the spin's start, the spin) is one wait
    /// to the prediction, whose cost is per release.
    waited_for_ns: Option<u64>,
}

/// A share of a core's time saved up for spinning: it grows by `ppm` of the
/// time passed, up to `max_ns`, and what is spent is taken from it. The
/// output thread's spin and the live stage's holds and windows each keep
/// one, so that neither takes more than its share over any stretch of time
/// (plus `max_ns`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Credit {
    ns: u64,
    at_ns: u64,
    ppm: u64,
    max_ns: u64,
}

impl Credit {
    fn full(now_ns: u64, ppm: u64, max_ns: u64) -> Self {
        Credit {
            ns: max_ns,
            at_ns: now_ns,
            ppm,
            max_ns,
        }
    }

    fn empty(now_ns: u64, ppm: u64, max_ns: u64) -> Self {
        Credit {
            ns: 0,
            ..Credit::full(now_ns, ppm, max_ns)
        }
    }

    /// What it holds at `now_ns`, having grown since it was last looked at
    /// (an earlier `now_ns` than that grows nothing).
    fn at(&mut self, now_ns: u64) -> u64 {
        let grown =
            u128::from(now_ns.saturating_sub(self.at_ns)) * u128::from(self.ppm) / 1_000_000;
        self.ns = (u128::from(self.ns) + grown).min(u128::from(self.max_ns)) as u64;
        self.at_ns = self.at_ns.max(now_ns);
        self.ns
    }

    /// Takes `ns` (all there is, when that is less).
    fn spend(&mut self, ns: u64) {
        self.ns = self.ns.saturating_sub(ns);
    }

    /// Gives back what a paid-for wait did not use (beyond `max_ns` too:
    /// it was saved before).
    fn refund(&mut self, ns: u64) {
        self.ns += ns;
    }
}

/// How many windows of its budget an output thread may save up and spend
/// at once: over any stretch of time it spins at most its budget's share of
/// it plus this many windows' worth (at 5 %, 5 ms), and a link quiet for a
/// while has a full spin for its first releases.
pub(super) const SPIN_CREDIT_WINDOWS: u64 = 10;

const DEFAULT_PPM: u64 = super::wake::DEFAULT_SPIN_BUDGET_PPM as u64;

/// The most an output thread's credit holds at a budget of `ppm`.
fn spin_credit_max_ns(ppm: u64) -> u64 {
    SPIN_WINDOW_NS * SPIN_CREDIT_WINDOWS * ppm / 1_000_000
}

const SPIN_WINDOW_NS: u64 = 10_000_000;
/// The most of each [`SPIN_WINDOW_NS`] the live stage lingers ([`Linger`]):
/// a quarter of a core at most, so that under steady traffic whose arrivals
/// come just far enough apart to keep the stage lingering (a flood from a host
/// on the same cores), the hosts keep three quarters of the core it runs on.
pub(super) const LINGER_SHARE_NS: u64 = SPIN_WINDOW_NS / 4;

impl SpinBudget {
    pub fn new(now: u64) -> Self {
        SpinBudget {
            window_start_ns: now,
            spun_ns: 0,
            frugal: false,
            lingered_ns: 0,
            cores: None,
            all_taken: false,
            ladder: SpinLadder::new(super::wake::DEFAULT_SPIN_BUDGET_PPM),
            spun_total_ns: 0,
            credit: Credit::empty(now, DEFAULT_PPM, spin_credit_max_ns(DEFAULT_PPM)),
            starved: false,
            waits: 0,
            waited_for_ns: None,
        }
    }

    /// An output thread's budget of `budget_ppm` of a core: with `watch`,
    /// it also spins as little as it can while every core is taken (without:
    /// `--spin-threshold` given).
    pub fn watching_cores(now: u64, watch: bool, budget_ppm: u32) -> Self {
        SpinBudget {
            cores: watch.then(CoreWatch::new),
            ladder: SpinLadder::new(budget_ppm),
            credit: Credit::full(
                now,
                u64::from(budget_ppm),
                spin_credit_max_ns(u64::from(budget_ppm)),
            ),
            ..SpinBudget::new(now)
        }
    }

    /// How long an output thread spins before the release it waits for at
    /// `now`: [`SpinBudget::spin_ns`], cut to the credit it holds (never
    /// below [`MIN_SPIN_NS`]). So the budget holds whatever the ladder
    /// stands at; a cut makes the window `starved`, which steps it down.
    pub fn allowed_spin_ns(&mut self, now: u64, wake: &WakeEstimate, max_ns: u64) -> u64 {
        let want_ns = self.spin_ns(wake, max_ns);
        let allowed_ns = self.credit.at(now).max(MIN_SPIN_NS);
        if want_ns > allowed_ns {
            self.starved = true;
        }
        want_ns.min(allowed_ns)
    }

    /// An output thread spun `ns` before a release: charged to the window
    /// and paid from the credit.
    pub fn spun(&mut self, ns: u64) {
        self.spun_ns += ns;
        self.credit.spend(ns);
    }

    /// Whether the live stage may linger (or hold, or wait for a beat) now:
    /// not while frugal, nor once [`LINGER_SHARE_NS`] of the window went to it.
    fn may_linger(&self) -> bool {
        !self.frugal && self.lingered_ns < LINGER_SHARE_NS
    }

    /// Ends the window once it is over; returns whether it did.
    pub fn tick(&mut self, now: u64) -> bool {
        self.end_window(now, None)
    }

    /// An output thread waited at `now` for the release at `release_ns`:
    /// counts the release (once, however many steps its wait took) and ends
    /// the window once it is over, its ladder stepping up only if `wake`
    /// predicts the step's spin (at most `max_ns`) fits the budget for as
    /// many releases as this window waited for.
    pub fn tick_waiting(
        &mut self,
        now: u64,
        release_ns: u64,
        wake: &WakeEstimate,
        max_ns: u64,
    ) -> bool {
        if self.waited_for_ns != Some(release_ns) {
            self.waited_for_ns = Some(release_ns);
            self.waits += 1;
        }
        self.end_window(now, Some((wake, max_ns)))
    }

    fn end_window(&mut self, now: u64, predict: Option<(&WakeEstimate, u64)>) -> bool {
        let elapsed = now.saturating_sub(self.window_start_ns);
        if elapsed >= SPIN_WINDOW_NS {
            self.frugal = self.spun_ns * 2 > elapsed;
            let up_cost_ns = predict.and_then(|(wake, max_ns)| {
                let up = self.ladder.up_quantile_ppm()?;
                Some(self.waits * wake.expected_spin_ns(wake.spin_ns(up, max_ns)))
            });
            self.ladder
                .window_ended(self.spun_ns, elapsed, self.starved, up_cost_ns);
            self.starved = false;
            self.waits = 0;
            self.spun_total_ns += self.spun_ns;
            self.window_start_ns = now;
            self.spun_ns = 0;
            self.lingered_ns = 0;
            self.all_taken = self.cores.as_mut().is_some_and(CoreWatch::all_taken);
            return true;
        }
        false
    }

    /// What the output thread reports of its waiting ([`SpinStats`]): the
    /// spin it uses now, which covers none of its wake-ups while every core
    /// is taken.
    pub fn report(&self, wake: &WakeEstimate, max_ns: u64) -> SpinStats {
        let covers_ppm = if self.all_taken {
            0
        } else {
            self.ladder.quantile_ppm()
        };
        SpinStats::of(
            wake,
            self.ladder.budget_ppm,
            covers_ppm,
            self.spun_total_ns,
            self.spin_ns(wake, max_ns),
        )
    }

    /// How long an output thread spins before a release: long enough for
    /// the quantile of `wake` its ladder stands at (at most `max_ns`), or
    /// [`MIN_SPIN_NS`] while every core is taken.
    pub fn spin_ns(&self, wake: &WakeEstimate, max_ns: u64) -> u64 {
        if self.all_taken {
            MIN_SPIN_NS.min(max_ns)
        } else {
            wake.spin_ns(self.ladder.quantile_ppm(), max_ns)
        }
    }
}

/// Whether every core of the machine is taken, looked at once per spin
/// window by each output thread: while it is, a spin to a release time takes
/// a core from a thread that is ready to run (a host's TCP end, the live
/// stage, the other direction), and the output thread sleeps to its releases
/// instead (spinning only [`MIN_SPIN_NS`]).
///
/// The figure is the kernel's count of runnable tasks, the fourth field of
/// `/proc/loadavg` ("2/345": 2 running or ready), which counts the looking
/// thread itself; the cores are the ones this process may run on; taken
/// means more runnable tasks than cores at [`TAKEN_LOOKS`] looks in a row.
/// Why: bulk TCP through `delay 10ms` between two hosts on this project's
/// 2-core machine had the two output threads spinning on most of a core
/// (perf: 30 % and 18 % of all samples), and carried 13-18 % more (10.5-11.1
/// against 9.1-9.5 Gbit/s) once they slept instead; the probe's delay and
/// gap figures at 1 and 20 kpps and in bursts of 64 stayed within the noise
/// of the spinning build's (docs/numbers.md, "Spinning only while a core is
/// spare"). A machine with a core to spare keeps the spin and its sub-µs
/// median; `--spin-threshold` given spins regardless (`spin_always`), for
/// cores that are linkem's alone.
#[derive(Debug)]
pub(super) struct CoreWatch {
    loadavg: Option<std::fs::File>,
    cores: u64,
    /// Consecutive looks that found every core taken.
    taken_looks: u32,
}

/// Looks in a row (one per spin window) that must find every core taken
/// before the output thread stops spinning: a thread that is ready for a
/// moment (the live stage woken by one packet) is seen now and then at
/// moderate rates; bulk traffic keeps the cores taken at every look.
const TAKEN_LOOKS: u32 = 3;

impl CoreWatch {
    pub fn new() -> Self {
        CoreWatch {
            // Without /proc the watch says "not all taken": the spin as before.
            loadavg: std::fs::File::open("/proc/loadavg").ok(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
            taken_looks: 0,
        }
    }

    /// Looks once more: whether more tasks were ready to run than there are
    /// cores at each of the last [`TAKEN_LOOKS`] looks.
    pub fn all_taken(&mut self) -> bool {
        let runnable = self.runnable();
        self.look(runnable)
    }

    /// Whether more tasks are ready to run than there are cores, at one look.
    pub fn taken_now(&self) -> bool {
        self.more_than_cores(self.runnable())
    }

    /// Whether `runnable` tasks (`None`: unreadable) are more than the cores.
    fn more_than_cores(&self, runnable: Option<u64>) -> bool {
        runnable.is_some_and(|r| r > self.cores)
    }

    /// One look that found `runnable` tasks (`None`: unreadable, not taken).
    fn look(&mut self, runnable: Option<u64>) -> bool {
        let taken = self.more_than_cores(runnable);
        self.taken_looks = if taken { self.taken_looks + 1 } else { 0 };
        self.taken_looks >= TAKEN_LOOKS
    }

    fn runnable(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 128];
        let n = self.loadavg.as_ref()?.read_at(&mut buf, 0).ok()?;
        runnable_of_loadavg(&buf[..n])
    }
}

/// The runnable count of a `/proc/loadavg` line ("0.09 0.05 0.01 2/345 678").
fn runnable_of_loadavg(line: &[u8]) -> Option<u64> {
    let field = std::str::from_utf8(line).ok()?.split_whitespace().nth(3)?;
    field.split_once('/')?.0.parse().ok()
}

/// Default for [`super::live::LiveOptions::linger_ns`] (`--linger`): how long
/// the live stage keeps polling its ports after frames it took leave before
/// it sleeps. Sized from the answer of a host process (a UDP echo server) on
/// this project's 2-core VM: it comes back through the other port 50-100 µs after
/// the stage sent the request (the server's own wake-up); lingering 50 µs
/// caught a fifth of the answers, 100 µs all of them (one stage wake-up per
/// exchange instead of two, echo RTT 123 µs instead of 172: docs/numbers.md,
/// "Where a small delay's floor goes"). Linux's busy polling
/// (`net.core.busy_poll`) defaults to 50 µs for the same purpose on a socket.
pub const DEFAULT_LINGER_NS: u64 = 100_000;

/// The live stage's linger: after a turn that took or sent frames leaving
/// within `linger_ns` (released at once or soon), it goes round its loop
/// without sleeping (non-blocking receives) until `linger_ns` after they
/// leave, so that an answer to them, or the next frame of a burst that
/// crosses at once, is taken without a wake-up.
///
/// Armed by what leaves soon, not by every arrival: an answer can only come
/// after what it answers has left, so a frame the stage stores for a later
/// release (a delay, a queue behind a rate) gives it nothing to linger for.
/// Lingering after such arrivals too (the first version) gave a saturating
/// sender on the same cores an even share of the stage's core, since the
/// stage lingers at ordinary priority and yields: AF_XDP's saturated 64-byte
/// `delay 10ms` row fell to 0.56x of the stage that waits under SCHED_FIFO.
/// Lingering after frames that leave at once is what lets a flood from a host
/// on the same cores (iperf3) through an unimpaired link reach its receiver
/// without a real-time wake-up per arrival: 81 kpps against 35 when armed by
/// the stage's own sends only (under a flood the output thread sends), see
/// docs/numbers.md, "Lingering after departures".
///
/// **Holds on sparse traffic.** A frame held longer than `linger_ns` (a
/// `delay 200us`) would cost a second wake-up, the timed one to its release,
/// after the arrival's. So the stage also stays awake through a hold
/// (`holding`: polling in the policy it woke in, SCHED_FIFO by default)
/// when its credit pays for it, and the hold is at most `hold_max_ns` (the
/// stage's horizon: a later release is the output thread's to send).
///
/// **Arrivals on a beat.** A frame that finds the stage asleep costs its
/// wake-up (50-100 µs on a VM whose idle vCPU halts), so a port whose
/// arrivals keep a beat (the `cadence` module: a ping, a keep-alive, a game
/// tick) has the stage awake for the window its next frame is expected in
/// (`expecting`): it sleeps until the learnt wake-up lateness before the
/// window, then polls through it at ordinary priority, as it lingers (a host
/// must be able to send on its core), until a frame comes or the window
/// ends. The wait is paid from the credit when it is decided, if the credit
/// keeps enough for a hold after it (`hold_max_ns`: a frame on a beat
/// through `delay 200us` is to cost one wake-up too), and what is left of it
/// when the frame comes goes back before its hold is paid for.
///
/// **Yields.** Lingering, holding and awake in a window, the stage polls and
/// yields its core between polls, so that a host on it can run. A busy task
/// that takes the core at such a yield and keeps it until the tick (a build
/// at idle priority) makes each poll a wait of milliseconds; after two such
/// yields the stage pauses all but its SCHED_FIFO holds ([`Yields`]).
///
/// **The credit.** Holds and windows draw on one credit that grows by
/// `hold_ppm` (`--spin-budget`) of the time passed, up to [`CREDIT_MAX_NS`]:
/// over any stretch of time they take at most that share of a core plus
/// the cap. Sparse traffic (1-100 pps through `delay 200us`, or a ping's
/// beat) costs one wake-up per frame; traffic dense enough that its holds
/// would cost more sleeps to its releases as before.
///
/// Invariants: it never lingers unless frames left or were taken to leave
/// within `linger_ns` (or a paid-for hold or window), so an idle stage does
/// not spin; it charges the time it lingers to the stage's [`SpinBudget`]
/// (measured between its own turns, not counted per turn), and stops for the
/// rest of the window once the budget is frugal (more than half the window
/// spent spinning) or [`LINGER_SHARE_NS`] of the window went to lingering.
/// So a stage lingers at most `linger_ns` per departure beyond what its
/// credit paid for, and a quarter of a core over any 10 ms window.
/// `linger_ns` 0 (`--linger 0`) never lingers, not through holds or windows
/// either.
pub(super) struct Linger {
    linger_ns: u64,
    /// When the last frames taken to leave soon left (or leave).
    last_leave_ns: Option<u64>,
    /// The previous turn of this linger, whose time since is charged.
    turn_ns: Option<u64>,
    hold_max_ns: u64,
    /// What holds and windows may still take: grows by `hold_ppm` of the
    /// time, up to [`CREDIT_MAX_NS`].
    credit: Credit,
    /// The window paid for: awake from its first instant until its second.
    awake_for: Option<(u64, u64)>,
    /// Whether yields at ordinary priority keep the core ([`Yields`]).
    yields: Yields,
    /// The stage holds under SCHED_FIFO (`holds_keep_core`).
    holds_keep_core: bool,
}

/// The most credit the stage saves for holds and windows ([`Linger`]): a
/// window is at most 10 ms with its lead (a slow beat whose frames stray by
/// milliseconds gets none), and a link quiet for a while pays for at most
/// this much spinning at once.
pub(super) const CREDIT_MAX_NS: u64 = 10_000_000;

impl Linger {
    /// Lingers `linger_ns` after departures; stays through holds of at most
    /// `hold_max_ns`, and through windows of expected arrivals, from a
    /// credit of `hold_ppm` of the time (0: never).
    pub fn new(linger_ns: u64, hold_ppm: u32, hold_max_ns: u64) -> Self {
        Linger {
            linger_ns,
            last_leave_ns: None,
            turn_ns: None,
            hold_max_ns,
            credit: Credit::full(0, u64::from(hold_ppm), CREDIT_MAX_NS),
            awake_for: None,
            yields: Yields::watching(CoreWatch::new()),
            holds_keep_core: false,
        }
    }

    /// The stage waits, and so holds, under SCHED_FIFO: a hold goes on while
    /// lost yields pause the rest of its lingering ([`Yields`]).
    pub fn holds_keep_core(self, yes: bool) -> Self {
        Linger {
            holds_keep_core: yes,
            ..self
        }
    }

    /// Whether the budget and the yields let the stage poll on at `now_ns`.
    fn may_poll(&mut self, now_ns: u64, budget: &SpinBudget) -> bool {
        budget.may_linger() && !self.yields.paused(now_ns)
    }

    /// The yields that lost the core so far (`rx_yields_lost`).
    pub fn yields_lost(&self) -> u64 {
        self.yields.lost
    }

    /// A turn that started at `now_ns` took frames, the earliest received
    /// at `stamp_ns` (when known): the linger that led to it is charged up
    /// to then, the turn's own work is not; what is left of a window paid
    /// for goes back to the credit. Returns whether that frame came in the
    /// window the stage was awake for (a wake-up saved): judged by its
    /// stamp, since the stage, polling, takes a frame some µs after it came
    /// (20-40 µs on this project's VM), after the window's end for one that
    /// came at its close.
    pub fn took(&mut self, now_ns: u64, stamp_ns: Option<u64>, budget: &mut SpinBudget) -> bool {
        self.charge(now_ns, budget);
        let Some((from_ns, until_ns)) = self.awake_for.take() else {
            return false;
        };
        self.credit
            .refund(until_ns.saturating_sub(now_ns.max(from_ns)));
        (from_ns..until_ns).contains(&stamp_ns.unwrap_or(now_ns))
    }

    /// A turn that started at `now_ns` took (or sent) frames, the earliest
    /// of which leaves at `release_ns`: when that is within the linger, an
    /// answer may follow it; when it is a hold the credit pays for, the
    /// stage stays awake until it leaves.
    pub fn leaving(&mut self, now_ns: u64, release_ns: u64) {
        let hold_ns = release_ns.saturating_sub(now_ns);
        if hold_ns < self.linger_ns
            || (hold_ns <= self.hold_max_ns && self.pays(now_ns, hold_ns, 0))
        {
            self.last_leave_ns = Some(release_ns.max(now_ns));
        }
    }

    /// Takes `cost_ns` from the credit as of `now_ns`, if it holds that much
    /// and `keep_ns` more.
    fn pays(&mut self, now_ns: u64, cost_ns: u64, keep_ns: u64) -> bool {
        if self.linger_ns == 0 || self.credit.ppm == 0 {
            return false;
        }
        let paid = cost_ns.saturating_add(keep_ns) <= self.credit.at(now_ns);
        if paid {
            self.credit.spend(cost_ns);
        }
        paid
    }

    /// Whether the stage lingers for a release still ahead (a hold), not
    /// for an answer to frames that left: nothing can answer yet, so it
    /// need not leave SCHED_FIFO for a host that would.
    pub fn holding(&self, now_ns: u64) -> bool {
        self.last_leave_ns.is_some_and(|a| a > now_ns)
    }

    /// A frame is `expected` within a window (`Turn::expected`): from when
    /// the stage is to be awake for it, if the credit paid for the wait from
    /// `lead_ns` (its wake-up lateness) before the window to the window's
    /// end, or already had; None when it did not, the window is over, or
    /// the budget allows no lingering now.
    pub fn expecting(
        &mut self,
        now_ns: u64,
        expected: Option<(u64, u64)>,
        lead_ns: u64,
        budget: &SpinBudget,
    ) -> Option<u64> {
        if !self.may_poll(now_ns, budget) {
            return None;
        }
        if let Some((from_ns, until_ns)) = self.awake_for {
            if now_ns < until_ns {
                return Some(from_ns);
            }
            // The window passed without a frame.
            self.awake_for = None;
        }
        let (start_ns, until_ns) = expected.filter(|&(_, until)| until > now_ns)?;
        let from_ns = start_ns.saturating_sub(lead_ns).max(now_ns);
        // A hold may follow the frame: the window leaves the credit for one.
        if !self.pays(now_ns, until_ns - from_ns, self.hold_max_ns) {
            return None;
        }
        self.awake_for = Some((from_ns, until_ns));
        Some(from_ns)
    }

    /// Whether the stage polls once more at `now_ns` within the window it
    /// is awake for; charges `budget` as lingering does, and stops (the
    /// rest of the window given back) once the budget is frugal or the
    /// window's share is spent.
    pub fn awake(&mut self, now_ns: u64, budget: &mut SpinBudget) -> bool {
        self.charge(now_ns, budget);
        let Some((from_ns, until_ns)) = self.awake_for else {
            return false;
        };
        if now_ns < from_ns || now_ns >= until_ns {
            return false;
        }
        if !self.may_poll(now_ns, budget) {
            self.awake_for = None;
            self.credit.refund(until_ns - now_ns);
            return false;
        }
        self.turn_ns = Some(now_ns);
        true
    }

    fn charge(&mut self, now_ns: u64, budget: &mut SpinBudget) {
        if let Some(t) = self.turn_ns.take() {
            let spent = now_ns.saturating_sub(t);
            budget.spun_ns += spent;
            budget.lingered_ns += spent;
            // Between its lingering turns the stage only yields: a long gap
            // is the core lost at the yield (or a stall).
            self.yields.yielded(t, now_ns);
        }
    }

    /// Whether the stage should go round once more instead of sleeping, at
    /// `now_ns` with nothing taken; charges `budget` with the time since its
    /// previous linger turn.
    pub fn keep_polling(&mut self, now_ns: u64, budget: &mut SpinBudget) -> bool {
        self.charge(now_ns, budget);
        let within = self
            .last_leave_ns
            .is_some_and(|a| now_ns.saturating_sub(a) < self.linger_ns);
        // Through a hold under SCHED_FIFO no ordinary task takes the core at
        // a yield: holds go on while the rest pauses.
        let paused = self.yields.paused(now_ns) && !(self.holds_keep_core && self.holding(now_ns));
        let keep = within && budget.may_linger() && !paused;
        if keep {
            self.turn_ns = Some(now_ns);
        } else {
            // Lingering ends until frames leave again.
            self.last_leave_ns = None;
        }
        keep
    }
}

/// A yield at ordinary priority that returns this much later (measured as
/// the gap between two of the stage's lingering turns, which only yield in
/// between: no clock is read for it) handed the core to a task that keeps it
/// until its slice or the tick ends: not a host
/// sending or answering on the stage's core (at most 200 µs in quiet runs of
/// pings through `delay 1us`), but a busy one. A SCHED_IDLE build beside
/// linkem does it to every window: the stage, just woken, yields to it and
/// waits for the next tick (3.7-5 ms lost at HZ 250), so that a ping through
/// `delay 1us` 20 ms apart took 3.2 ms at the 90th percentile against the
/// bridge's 86 µs (docs/numbers.md, "A yield that loses the core"). This
/// VM's stalls (0.6-1.5 ms) pass it too, one at a time: see [`Yields`].
pub(super) const YIELD_LOST_NS: u64 = 500_000;

/// A second lost yield within this of the one before (or of the end of a
/// pause) means a busy task is beside the stage; one alone is a stall of
/// the machine (this project's VM stalls for milliseconds now and then, and
/// one in a yield must not pause the windows of a quiet machine).
const YIELD_REPEAT_NS: u64 = 2_000_000_000;

/// The first pause of lingering once yields lose the core; each pause that
/// begins within [`YIELD_BACKOFF_MAX_NS`] of the end of the one before is
/// twice as long, up to that.
const YIELD_BACKOFF_MIN_NS: u64 = 100_000_000;
const YIELD_BACKOFF_MAX_NS: u64 = 10_000_000_000;

/// Whether yielding keeps the stage's core. The stage lingers, holds and
/// waits in windows by polling and yielding, so that a host on its core can
/// run; a task that takes the core at a yield and keeps it (see
/// [`YIELD_LOST_NS`]) turns each such poll into a wait for the tick, longer
/// than any wake-up it saves. After a second such yield within
/// [`YIELD_REPEAT_NS`], the stage lingers no more after departures nor
/// waits in windows (it sleeps in its poll, where a frame's arrival wakes
/// it as it would without lingering) for a pause that doubles with each
/// pause that follows the one before within [`YIELD_BACKOFF_MAX_NS`], from
/// [`YIELD_BACKOFF_MIN_NS`] to that. Holds pause too, unless the stage
/// holds under SCHED_FIFO ([`Linger::holds_keep_core`]), where no ordinary
/// task takes the core at a yield.
///
/// At a pause's end the stage looks once whether more tasks are ready to
/// run than there are cores ([`CoreWatch::taken_now`]: a busy task at any
/// priority is always ready); if so the pause is renewed, twice as long, up
/// to the same 10 s, without a yield lost to find out. A busy task that is
/// ready only now and then is found by the next lost yields instead.
///
/// Invariants: a lone lost yield pauses nothing; while busy tasks stay
/// beside it, the stage loses two yields and then one per pause that ends
/// with no more tasks ready than cores (at most one every 10 s).
#[derive(Debug, Default)]
pub(super) struct Yields {
    /// Lingering pauses until then.
    paused_until_ns: u64,
    /// The latest pause, 0 before any.
    pause_ns: u64,
    /// When the latest loss was, 0 before any.
    lost_at_ns: u64,
    /// Yields that lost the core.
    lost: u64,
    /// Looks at each pause's end (None: never looks, the pause just ends).
    watch: Option<CoreWatch>,
    /// Whether the latest pause's end was looked at.
    looked: bool,
}

impl Yields {
    /// A yield from `before_ns` returned at `after_ns`.
    pub fn yielded(&mut self, before_ns: u64, after_ns: u64) {
        if after_ns.saturating_sub(before_ns) < YIELD_LOST_NS {
            return;
        }
        self.lost += 1;
        let since_ns = after_ns.saturating_sub(self.lost_at_ns.max(self.paused_until_ns));
        let repeat = self.lost_at_ns > 0 && since_ns < YIELD_REPEAT_NS;
        self.lost_at_ns = after_ns;
        if !repeat {
            return;
        }
        let follows = self.pause_ns > 0
            && after_ns.saturating_sub(self.paused_until_ns) < YIELD_BACKOFF_MAX_NS;
        self.pause(after_ns, follows);
    }

    /// Pauses from `at_ns`: twice the latest pause if it `follows` one, else
    /// the first pause's length.
    fn pause(&mut self, at_ns: u64, follows: bool) {
        self.pause_ns = match follows {
            true => (self.pause_ns * 2).min(YIELD_BACKOFF_MAX_NS),
            false => YIELD_BACKOFF_MIN_NS,
        };
        self.paused_until_ns = at_ns + self.pause_ns;
        self.looked = false;
    }

    /// Looks at each pause's end with `watch`.
    pub fn watching(watch: CoreWatch) -> Self {
        Yields {
            watch: Some(watch),
            ..Yields::default()
        }
    }

    /// Whether lingering pauses at `now_ns`: the first call after a pause
    /// ended looks whether every core is still taken, and renews it if so.
    pub fn paused(&mut self, now_ns: u64) -> bool {
        if now_ns < self.paused_until_ns {
            return true;
        }
        if self.pause_ns == 0 || self.looked {
            return false;
        }
        self.looked = true;
        if !self.watch.as_ref().is_some_and(CoreWatch::taken_now) {
            return false;
        }
        self.pause(now_ns, true);
        true
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

    /// The stage lingers for traffic ([`Linger`]): at ordinary priority,
    /// since a real-time spinner would keep the very host whose answer it
    /// waits for off its core (a host woken on the stage's core by the frame
    /// the stage just sent cannot run until the linger ends: a UDP echo took
    /// 210-325 µs instead of 156 when the stage lingered under SCHED_FIFO).
    /// [`Realtime::wait_mode`] or [`Realtime::idle_mode`] restore the policy
    /// before the stage sleeps.
    pub fn linger_mode(&mut self) -> Result<(), String> {
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

#[cfg(test)]
mod tests;

//! What a thread learns of this machine's wake-ups, and how long it spins
//! before a release because of it.
//!
//! A timed sleep wakes late by the machine's wake-up latency (a timer
//! interrupt, a context switch, on a VM a halted vCPU brought back): a few µs
//! on a quiet machine, tens of µs on a loaded VM, milliseconds when preempted.
//! A thread that must send at a release time sleeps until `spin` before it and
//! spins the rest; `spin` is a quantile of the overshoots its own timed sleeps
//! were recently seen to have ([`WakeEstimate`]), so a release is on time
//! whenever the wake-up is no later than that quantile.
//!
//! Which quantile is set by the thread's spin budget ([`SpinLadder`]): the
//! share of a core the thread may spend spinning over each window
//! (`--spin-budget`, default [`DEFAULT_SPIN_BUDGET_PPM`], 5 %). Within it, the spin
//! covers 99 % of wake-ups; a window over it steps the spin down the ladder
//! (99 % → 90 % → 50 % → [`MIN_SPIN_NS`]), a window under half of it steps
//! back up, unless the step's spin would not fit the budget at the window's
//! count of releases ([`WakeEstimate::expected_spin_ns`]: what each learnt
//! wake-up leaves to spin). Every spin is paid from a credit that grows by
//! the budget (`SpinBudget::allowed_spin_ns`), so the ladder's steps cannot
//! overspend it. So a sparse link spins to cover almost every wake-up (a few µs per
//! packet), and a steady 100 Mbit/s flow, whose releases come every 120 µs,
//! does not hold a core spinning for them: it trades the tail of lateness
//! (the wake-ups beyond the lower quantile, each no later than a plain timer
//! wake-up) for CPU, and keeps the median on time while the spin still covers
//! the median wake-up.
//!
//! Invariants: an idle thread never spins (it spins only before a release);
//! over any stretch of time it spins at most its budget's share of it plus
//! `SPIN_CREDIT_WINDOWS` windows' worth, and [`MIN_SPIN_NS`] per release
//! beyond that; the estimate forgets: counts halve every
//! [`WAKE_WINDOW`] sleeps, so a burst of preemptions is gone after about a
//! thousand sleeps, while a steady latency keeps its quantile.

/// The least the output thread spins, so that a fast wake-up still has room.
pub(super) const MIN_SPIN_NS: u64 = 3_000;

/// Default share of a core each output thread may spend spinning before
/// releases, in parts per million: 5 %. A link of 1 kpps through a long
/// delay covers 90 % of its wake-ups on this project's VM (45-64 µs at the
/// median, 90-181 µs at the 99th percentile: it spins 2-3 % of a core, and
/// 99 % would cost 9 %; docs/numbers.md, "A release is one wait"); a link
/// releasing every 120 µs (100 Mbit/s of full frames) would spin a third of a
/// core for that, and instead covers the median wake-up or none. Measured at
/// 100 Mbit/s through `delay 10ms` beside Rattan (`scripts/bench-rattan.sh`,
/// docs/numbers.md, "The spin budget held"): 53 s of CPU per GB at 5 %, 56
/// with no spin, 72 at 25 %, Rattan 59-63 in the same runs.
pub const DEFAULT_SPIN_BUDGET_PPM: u32 = 50_000;

/// Upper bounds of the histogram's buckets, ns: about 1.4x apart from 1 µs to
/// 1 ms. A quantile is answered with the upper bound of its bucket, so it errs
/// towards spinning a little longer.
const WAKE_BOUNDS_NS: [u64; 20] = [
    1_000, 2_000, 3_000, 4_000, 6_000, 8_000, 11_000, 16_000, 22_000, 32_000, 45_000, 64_000,
    90_000, 128_000, 181_000, 256_000, 362_000, 512_000, 724_000, 1_000_000,
];

/// Sleeps counted before every count halves (see the module doc).
pub(super) const WAKE_WINDOW: u32 = 512;

/// The spin before anything is learnt: the loaded VM's typical overshoot.
const UNLEARNT_NS: u64 = 50_000;

/// How late this thread's timed sleeps woke: a histogram of recent overshoots
/// that halves every [`WAKE_WINDOW`] sleeps.
#[derive(Debug, Clone)]
pub(super) struct WakeEstimate {
    counts: [u32; WAKE_BOUNDS_NS.len()],
    total: u32,
}

impl Default for WakeEstimate {
    fn default() -> Self {
        WakeEstimate {
            counts: [0; WAKE_BOUNDS_NS.len()],
            total: 0,
        }
    }
}

impl WakeEstimate {
    pub fn observe(&mut self, overshoot_ns: u64) {
        // A wake-up later than a millisecond is a preemption, not timer
        // latency: it lands in the last bucket, which no quantile below 99.9 %
        // reaches unless preemptions are that common.
        let i = WAKE_BOUNDS_NS
            .iter()
            .position(|&b| overshoot_ns <= b)
            .unwrap_or(WAKE_BOUNDS_NS.len() - 1);
        self.counts[i] += 1;
        self.total += 1;
        if self.total >= WAKE_WINDOW {
            self.total = 0;
            for c in &mut self.counts {
                *c /= 2;
                self.total += *c;
            }
        }
    }

    /// The overshoot that `ppm` parts per million of the recent sleeps did
    /// not exceed (the upper bound of its bucket); [`UNLEARNT_NS`] before
    /// any sleep was seen.
    pub fn quantile_ns(&self, ppm: u32) -> u64 {
        if self.total == 0 {
            return UNLEARNT_NS;
        }
        let rank = (u64::from(self.total) * u64::from(ppm))
            .div_ceil(1_000_000)
            .max(1);
        let mut seen = 0u64;
        for (c, b) in self.counts.iter().zip(WAKE_BOUNDS_NS) {
            seen += u64::from(*c);
            if seen >= rank {
                return b;
            }
        }
        WAKE_BOUNDS_NS[WAKE_BOUNDS_NS.len() - 1]
    }

    /// The mean spin per release with a spin of `spin_ns`: a thread woken
    /// `late` after the spin's start spins `spin_ns - late`, none when later.
    /// Each bucket counts from its lower bound, so it errs towards a larger
    /// cost; before any sleep, `spin_ns` itself.
    pub fn expected_spin_ns(&self, spin_ns: u64) -> u64 {
        if self.total == 0 {
            return spin_ns;
        }
        let lower = std::iter::once(0).chain(WAKE_BOUNDS_NS);
        let sum: u64 = self
            .counts
            .iter()
            .zip(lower)
            .map(|(&c, low)| u64::from(c) * spin_ns.saturating_sub(low))
            .sum();
        sum / u64::from(self.total)
    }

    /// Whether 99 % of the sleeps learnt woke within `spin_ns` (false before
    /// any): then a long wait needs no approach ([`APPROACH_NS`]).
    pub fn covered_by(&self, spin_ns: u64) -> bool {
        self.total > 0 && self.quantile_ns(SPIN_LADDER_PPM[0]) + MIN_SPIN_NS <= spin_ns
    }

    /// How long before a release this thread must be woken to be on time
    /// (its 99th percentile, at most `max_ns`), whatever its budget lets it
    /// spin: the live stage sends a release closer than that itself
    /// (`output::who_sends`).
    pub fn wake_ns(&self, max_ns: u64) -> u64 {
        self.spin_ns(SPIN_LADDER_PPM[0], max_ns)
    }

    /// How long to spin before a release to cover `ppm` of the wake-ups
    /// (0: [`MIN_SPIN_NS`] only), at most `max_ns`.
    pub fn spin_ns(&self, ppm: u32, max_ns: u64) -> u64 {
        if ppm == 0 {
            return MIN_SPIN_NS.min(max_ns);
        }
        (self.quantile_ns(ppm) + MIN_SPIN_NS).min(max_ns)
    }
}

/// How far before a release a long wait ends in a second, short one, on a
/// machine whose long sleeps wake later than the spin covers: on this
/// project's VM a sleep of 10 ms wakes about 110 µs late at the median and
/// one of 50 µs about 15 µs late (`linkem bench tail`'s timer rows: a vCPU
/// idle longer than the host's halt polling, 200 µs by default in KVM, is
/// woken from the host's scheduler). So a long wait sleeps until this far
/// before the release, then once more until the spin, and the spin is sized
/// by the short sleep's precision, not the long one's.
///
/// That costs a second wake-up per release, so only a wait to the spin
/// longer than [`ONE_SLEEP_NS`] approaches. Each thread also learns its
/// sleeps longer than that apart ([`learn`]); once their 99th percentile is
/// within the spin (a quiet or bare-metal machine, where a long sleep is as
/// precise as a short one), it waits in one sleep.
pub(super) const APPROACH_NS: u64 = 200_000;

/// The longest wait to the spin's start taken in one sleep. Two sleeps of a
/// shorter wait each wake late: with releases 333 µs apart (3 kpps) and
/// the spin at its least, the second sleep ended about 100 µs late at the
/// median, and one sleep of up to 400 µs about 50 µs (sleeps of 50-400 µs
/// woke 43-49 µs late at the median on this project's VM, 1 ms ones 60 µs;
/// docs/numbers.md, "One sleep up to 400 µs").
pub(super) const ONE_SLEEP_NS: u64 = 2 * APPROACH_NS;

/// Where a wait that starts at `now_ns` for `release_ns` first parks until,
/// with a spin of `spin_ns` before the release (`max_ns` ahead at most), and
/// whether that is the spin's start (the wake-up the spin covers): with
/// `approach` (the thread's long sleeps are not known to wake within the
/// spin, [`WakeEstimate::covered_by`]), [`APPROACH_NS`] before the release
/// when the spin's start is further off than [`ONE_SLEEP_NS`] and the spin
/// shorter than the approach, else the spin's start.
pub(super) fn wait_target(
    now_ns: u64,
    release_ns: u64,
    spin_ns: u64,
    max_ns: u64,
    approach: bool,
) -> (u64, bool) {
    let spin_at = release_ns.saturating_sub(spin_ns);
    let approach_at = release_ns.saturating_sub(APPROACH_NS);
    let target = if approach && spin_ns < APPROACH_NS && spin_at > now_ns + ONE_SLEEP_NS {
        approach_at
    } else {
        spin_at
    };
    let target = target.min(now_ns + max_ns);
    (target, target == spin_at)
}

/// How long before a release the live stage wakes an output thread that
/// sleeps for a later one or for nothing (see `waker`): at the approach, then
/// the thread's own short sleep to the spin, whatever its long sleeps (a
/// spin of the whole lead right after this wake-up, whose timer the stage
/// armed from its own core, ended 5-15 µs late on this project's VM, where
/// the same spin after the thread's own short sleep is on time).
pub(super) fn lead_ns(spin_ns: u64) -> u64 {
    APPROACH_NS.max(spin_ns)
}

/// After a park from `from_ns` until `target_ns` that ended at `woke_ns`:
/// a sleep longer than [`ONE_SLEEP_NS`] teaches `long`, the one that ends
/// where the spin starts (`last`) teaches `short`, the estimate the spin is
/// sized by. A park cut short (a frame due earlier, a stop) says nothing.
pub(super) fn learn(
    short: &mut WakeEstimate,
    long: &mut WakeEstimate,
    from_ns: u64,
    target_ns: u64,
    woke_ns: u64,
    last: bool,
) {
    let Some(late_ns) = woke_ns.checked_sub(target_ns) else {
        return;
    };
    if target_ns.saturating_sub(from_ns) > ONE_SLEEP_NS {
        long.observe(late_ns);
    }
    if last {
        short.observe(late_ns);
    }
}

/// The quantiles of wake-ups a spin covers, from the most (within budget) to
/// none (only [`MIN_SPIN_NS`]).
pub(super) const SPIN_LADDER_PPM: [u32; 4] = [990_000, 900_000, 500_000, 0];

/// Where on [`SPIN_LADDER_PPM`] a thread's spin stands, moved once per window
/// by the share of it that went to spinning.
#[derive(Debug, Clone, Copy)]
pub(super) struct SpinLadder {
    pub budget_ppm: u32,
    step: usize,
}

impl SpinLadder {
    pub fn new(budget_ppm: u32) -> Self {
        SpinLadder {
            budget_ppm,
            // A budget of nothing spins nothing from the start.
            step: if budget_ppm == 0 {
                SPIN_LADDER_PPM.len() - 1
            } else {
                0
            },
        }
    }

    /// The quantile of wake-ups the spin covers now.
    pub fn quantile_ppm(&self) -> u32 {
        SPIN_LADDER_PPM[self.step]
    }

    /// The quantile one step up, if there is one.
    pub fn up_quantile_ppm(&self) -> Option<u32> {
        self.step.checked_sub(1).map(|i| SPIN_LADDER_PPM[i])
    }

    /// A window of `elapsed_ns` ended having spun `spun_ns`: over the
    /// budget, or `starved` (a spin was cut short because the budget was
    /// spent), one step down; under half of it, one step up, unless the
    /// step up is predicted to cost more than the budget (`up_cost_ns`, what
    /// the window's waits would have spun there; None: not predicted).
    /// Without the prediction, a link whose releases are dense (a steady
    /// 100 Mbit/s) would step up into a spin it cannot afford every other
    /// window, and spend twice its budget on average.
    pub fn window_ended(
        &mut self,
        spun_ns: u64,
        elapsed_ns: u64,
        starved: bool,
        up_cost_ns: Option<u64>,
    ) {
        let budget_ns = u128::from(elapsed_ns) * u128::from(self.budget_ppm) / 1_000_000;
        let spun_ns = u128::from(spun_ns);
        let up_fits = up_cost_ns.is_none_or(|c| u128::from(c) <= budget_ns);
        if spun_ns > budget_ns || starved {
            self.step = (self.step + 1).min(SPIN_LADDER_PPM.len() - 1);
        } else if spun_ns * 2 < budget_ns && self.budget_ppm > 0 && up_fits {
            self.step = self.step.saturating_sub(1);
        }
    }
}

/// What an output thread reports of its waiting, in each direction it serves
/// (as `tx_wakeups`): its budget, what it spun, and what it learnt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpinStats {
    /// The share of a core it may spin, parts per million (`--spin-budget`).
    pub budget_ppm: u32,
    /// Time spent spinning before releases since the start, ns.
    pub spun_ns: u64,
    /// How long it spins before a release now, ns.
    pub spin_ns: u64,
    /// The quantile of its wake-ups that spin covers now, ppm (0: none,
    /// the budget is spent).
    pub covers_ppm: u32,
    /// How late its recent timed sleeps woke at the median, ns (the upper
    /// bound of the histogram's bucket; 0 before any sleep).
    pub wake_late_p50_ns: u64,
    /// The same at the 99th percentile.
    pub wake_late_p99_ns: u64,
    /// How long before its release it hands each frame to its port: the
    /// port's learnt send lead (`TxPort::send_lead_ns`, 0 where the port
    /// cannot learn one). Per direction: each port learns its own.
    pub send_lead_ns: u64,
}

impl SpinStats {
    pub(super) fn of(
        wake: &WakeEstimate,
        budget_ppm: u32,
        covers_ppm: u32,
        spun_ns: u64,
        spin_ns: u64,
    ) -> SpinStats {
        let learnt = wake.total > 0;
        SpinStats {
            budget_ppm,
            spun_ns,
            spin_ns,
            covers_ppm,
            wake_late_p50_ns: if learnt { wake.quantile_ns(500_000) } else { 0 },
            wake_late_p99_ns: if learnt { wake.quantile_ns(990_000) } else { 0 },
            send_lead_ns: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    #[test]
    fn a_long_wait_approaches_in_two_sleeps() {
        let max = 10_000 * US;
        // 5 ms ahead, spin 40 µs: first to 200 µs before, then to the spin.
        assert_eq!(
            wait_target(0, 5_000 * US, 40 * US, max, true),
            (4_800 * US, false)
        );
        assert_eq!(
            wait_target(4_810 * US, 5_000 * US, 40 * US, max, true),
            (4_960 * US, true)
        );
        // Within the approach: straight to the spin.
        assert_eq!(
            wait_target(0, 150 * US, 40 * US, max, true),
            (110 * US, true)
        );
        // The spin's start 400 µs off or nearer: one sleep (releases 333 µs
        // apart); further: the approach first.
        assert_eq!(
            wait_target(0, 440 * US, 40 * US, max, true),
            (400 * US, true)
        );
        assert_eq!(
            wait_target(0, 445 * US, 40 * US, max, true),
            (245 * US, false)
        );
        // A spin longer than the approach: straight to it.
        assert_eq!(
            wait_target(0, 5_000 * US, 300 * US, max, true),
            (4_700 * US, true)
        );
        // Far off: at most max_ns at a time.
        assert_eq!(
            wait_target(0, 50_000 * US, 40 * US, max, true),
            (10_000 * US, false)
        );
        // Long sleeps known to wake within the spin: one sleep.
        assert_eq!(
            wait_target(0, 5_000 * US, 40 * US, max, false),
            (4_960 * US, true)
        );
    }

    #[test]
    fn long_sleeps_as_precise_as_the_spin_need_no_approach() {
        let (mut short, mut long) = (WakeEstimate::default(), WakeEstimate::default());
        assert!(!long.covered_by(200 * US), "unlearnt: approach");
        // A VM: 10 ms sleeps wake 110 µs late, the short ones 15 µs.
        for _ in 0..100 {
            learn(&mut short, &mut long, 0, 9_800 * US, 9_910 * US, false);
            learn(
                &mut short,
                &mut long,
                9_910 * US,
                9_980 * US,
                9_995 * US,
                true,
            );
        }
        let spin = short.spin_ns(SPIN_LADDER_PPM[0], 200 * US);
        assert_eq!(spin, 19 * US, "sized by the short sleeps only");
        assert!(!long.covered_by(spin), "the long ones need the approach");
        // A quiet machine: every sleep wakes within 5 µs.
        let (mut short, mut long) = (WakeEstimate::default(), WakeEstimate::default());
        for _ in 0..100 {
            learn(&mut short, &mut long, 0, 9_990 * US, 9_994 * US, true);
        }
        let spin = short.spin_ns(SPIN_LADDER_PPM[0], 200 * US);
        assert!(long.covered_by(spin), "one sleep per release");
        // Cut short, or too short to be long: nothing learnt.
        let (mut short, mut long) = (WakeEstimate::default(), WakeEstimate::default());
        learn(&mut short, &mut long, 0, 1_000 * US, 900 * US, true);
        learn(&mut short, &mut long, 0, 100 * US, 105 * US, false);
        assert_eq!((short.total, long.total), (0, 0));
    }

    #[test]
    fn unlearnt_the_spin_is_the_loaded_machines_typical_overshoot() {
        let w = WakeEstimate::default();
        assert_eq!(w.spin_ns(990_000, 200 * US), UNLEARNT_NS + MIN_SPIN_NS);
        assert_eq!(w.spin_ns(0, 200 * US), MIN_SPIN_NS);
        assert_eq!(
            w.spin_ns(990_000, 10 * US),
            10 * US,
            "capped by --spin-threshold"
        );
    }

    #[test]
    fn quantiles_are_read_from_the_recent_overshoots() {
        let mut w = WakeEstimate::default();
        // 90 wake-ups 5 µs late, 9 at 20 µs, one at 300 µs.
        for _ in 0..90 {
            w.observe(5 * US);
        }
        for _ in 0..9 {
            w.observe(20 * US);
        }
        w.observe(300 * US);
        assert_eq!(
            w.quantile_ns(500_000),
            6 * US,
            "the median's bucket is 4-6 µs"
        );
        assert_eq!(w.quantile_ns(900_000), 6 * US);
        assert_eq!(w.quantile_ns(990_000), 22 * US);
        assert_eq!(w.quantile_ns(1_000_000), 362 * US);
        assert_eq!(w.spin_ns(990_000, 200 * US), 25 * US);
    }

    #[test]
    fn a_preemption_lands_in_the_last_bucket() {
        let mut w = WakeEstimate::default();
        w.observe(50_000 * US);
        assert_eq!(w.quantile_ns(500_000), 1_000 * US);
        assert_eq!(w.spin_ns(990_000, 200 * US), 200 * US);
    }

    #[test]
    fn old_overshoots_are_forgotten() {
        let mut w = WakeEstimate::default();
        for _ in 0..20 {
            w.observe(500 * US);
        }
        assert_eq!(w.quantile_ns(990_000), 512 * US);
        // Halving every WAKE_WINDOW sleeps: 20 → 10 → 5 → 2 → 1 → 0.
        for _ in 0..6 * WAKE_WINDOW {
            w.observe(3 * US);
        }
        assert_eq!(w.quantile_ns(1_000_000), 3 * US, "the old ones are gone");
        assert!(w.total < WAKE_WINDOW);
    }

    #[test]
    fn the_ladder_steps_down_over_budget_and_up_well_under_it() {
        let mut l = SpinLadder::new(250_000);
        assert_eq!(l.quantile_ppm(), 990_000);
        let window = 10_000 * US;
        l.window_ended(3_000 * US, window, false, None);
        assert_eq!(l.quantile_ppm(), 900_000, "30 % of the window is over 25 %");
        l.window_ended(2_000 * US, window, false, None);
        assert_eq!(
            l.quantile_ppm(),
            900_000,
            "20 % is within it, above its half"
        );
        for want in [500_000, 0, 0] {
            l.window_ended(window, window, false, None);
            assert_eq!(l.quantile_ppm(), want);
        }
        for want in [500_000, 900_000, 990_000, 990_000] {
            l.window_ended(1_000 * US, window, false, None);
            assert_eq!(l.quantile_ppm(), want);
        }
    }

    #[test]
    fn the_ladder_does_not_step_up_into_a_spin_it_cannot_afford() {
        let mut l = SpinLadder::new(50_000);
        let window = 10_000 * US;
        l.window_ended(window, window, false, None);
        l.window_ended(window, window, false, None);
        assert_eq!(l.quantile_ppm(), 500_000);
        // A window well under budget, but the step up would spend 6 %.
        l.window_ended(100 * US, window, false, Some(600 * US));
        assert_eq!(l.quantile_ppm(), 500_000);
        l.window_ended(100 * US, window, false, Some(400 * US));
        assert_eq!(l.quantile_ppm(), 900_000, "4 % fits 5 %");
        // A spin cut for want of credit steps down, whatever was spun.
        l.window_ended(100 * US, window, true, None);
        assert_eq!(l.quantile_ppm(), 500_000);
    }

    #[test]
    fn the_expected_spin_counts_what_each_wake_up_leaves_to_spin() {
        let mut w = WakeEstimate::default();
        assert_eq!(w.expected_spin_ns(40 * US), 40 * US, "unlearnt: all of it");
        // Half the sleeps in the bucket from 0 to 1 us, half in 32-45 us.
        for _ in 0..10 {
            w.observe(500);
            w.observe(40 * US);
        }
        // Spin 50 us: (50 - 0) / 2 + (50 - 32) / 2.
        assert_eq!(w.expected_spin_ns(50 * US), 34 * US);
        // Spin 20 us: the late half spins nothing.
        assert_eq!(w.expected_spin_ns(20 * US), 10 * US);
    }

    #[test]
    fn a_budget_of_nothing_never_spins_beyond_the_least() {
        let mut l = SpinLadder::new(0);
        assert_eq!(l.quantile_ppm(), 0);
        l.window_ended(0, 10_000 * US, false, None);
        assert_eq!(l.quantile_ppm(), 0, "an idle window does not step up");
        let w = WakeEstimate::default();
        assert_eq!(w.spin_ns(l.quantile_ppm(), 200 * US), MIN_SPIN_NS);
    }

    #[test]
    fn the_report_says_what_was_learnt() {
        let mut w = WakeEstimate::default();
        let l = SpinLadder::new(DEFAULT_SPIN_BUDGET_PPM);
        let of = |w: &WakeEstimate| {
            SpinStats::of(
                w,
                l.budget_ppm,
                l.quantile_ppm(),
                7,
                w.spin_ns(l.quantile_ppm(), 200 * US),
            )
        };
        let unlearnt = of(&w);
        assert_eq!(
            (unlearnt.wake_late_p50_ns, unlearnt.wake_late_p99_ns),
            (0, 0)
        );
        assert_eq!(unlearnt.spin_ns, UNLEARNT_NS + MIN_SPIN_NS);
        for _ in 0..100 {
            w.observe(10 * US);
        }
        let s = of(&w);
        assert_eq!(
            s,
            SpinStats {
                budget_ppm: 50_000,
                spun_ns: 7,
                spin_ns: 14 * US,
                covers_ppm: 990_000,
                wake_late_p50_ns: 11 * US,
                wake_late_p99_ns: 11 * US,
                send_lead_ns: 0,
            }
        );
    }
}

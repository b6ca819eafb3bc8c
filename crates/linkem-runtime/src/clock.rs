//! The real clock. The data plane uses CLOCK_REALTIME because that is the clock
//! of the kernel's packet receive timestamps; arrival and send times must be on
//! one clock for lateness to mean anything. (A step of the system clock during a
//! run shows up as lateness; run an NTP client in slew mode.)

/// Now, in ns since the epoch.
#[inline]
pub fn now_ns() -> u64 {
    now_ns_on(libc::CLOCK_REALTIME)
}

/// Now on `clock` (CLOCK_REALTIME, CLOCK_TAI, ...), in ns.
#[inline]
pub fn now_ns_on(clock: libc::clockid_t) -> u64 {
    linkem_io::sys::clock_ns(clock)
}

/// Sleeps until the absolute time `t_ns` (or a signal).
pub fn sleep_until_ns(t_ns: u64) {
    sleep_until_ns_on(libc::CLOCK_REALTIME, t_ns)
}

/// Sleeps until the absolute time `t_ns` on `clock` (or a signal).
pub fn sleep_until_ns_on(clock: libc::clockid_t, t_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (t_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (t_ns % 1_000_000_000) as libc::c_long,
    };
    // Safety: ts is a valid timespec; the remaining-time pointer may be null with TIMER_ABSTIME.
    unsafe { libc::clock_nanosleep(clock, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
}

/// Asks the kernel to wake this thread's sleeps within `slack_ns` of their
/// deadline. The default slack is 50 µs, which alone would miss the precision
/// targets; 1 ns makes a timed sleep end as soon as the timer fires.
pub fn set_timer_slack_ns(slack_ns: u64) {
    // Safety: PR_SET_TIMERSLACK takes an unsigned long and affects this thread only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, slack_ns as libc::c_ulong, 0, 0, 0) };
}

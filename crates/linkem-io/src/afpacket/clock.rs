//! The clocks the kernel stamps received frames with, read from user space.

use crate::sys::clock_ns;

/// The current `CLOCK_REALTIME` in nanoseconds: the clock of [`RxFrame::ts_ns`](linkem_core::port::RxFrame::ts_ns).
pub fn now_realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// The current `CLOCK_MONOTONIC` in nanoseconds.
pub fn now_monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The offset between `CLOCK_REALTIME` and `CLOCK_MONOTONIC`, measured once, to turn kernel
/// receive stamps (realtime) into monotonic nanoseconds. Realtime can be stepped (NTP,
/// `date -s`); re-measure after a step, or compare stamps with [`now_realtime_ns`] instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockOffset {
    /// `realtime - monotonic`, in nanoseconds.
    pub realtime_minus_monotonic_ns: i128,
}

impl ClockOffset {
    /// Measures the offset, taking the tightest of a few monotonic/realtime/monotonic
    /// brackets.
    pub fn measure() -> ClockOffset {
        let mut best: Option<(u64, i128)> = None;
        for _ in 0..8 {
            let m0 = now_monotonic_ns();
            let r = now_realtime_ns();
            let m1 = now_monotonic_ns();
            let width = m1 - m0;
            let off = r as i128 - (m0 as i128 + m1 as i128) / 2;
            if best.is_none_or(|(w, _)| width < w) {
                best = Some((width, off));
            }
        }
        ClockOffset {
            realtime_minus_monotonic_ns: best.map_or(0, |(_, o)| o),
        }
    }

    /// Converts a realtime stamp to monotonic nanoseconds.
    pub fn to_monotonic(&self, realtime_ns: u64) -> u64 {
        (realtime_ns as i128 - self.realtime_minus_monotonic_ns).max(0) as u64
    }
}

//! How an output thread sleeps, and how the live stage wakes it: now, or at
//! an instant the stage sets while the thread sleeps.
//!
//! A frame stored for a later release, while its output thread is parked with
//! nothing to send, used to cost that thread a wake-up to learn of it (an
//! unpark), then its own timed sleep to the release: a hand-over wake-up per
//! sparse packet, on top of the release's. Here the stage arms a timer (a
//! timerfd on the data plane's clock, `clock::now_ns`) at the instant the
//! thread wants to be woken before that release ([`Waker::lead_ns`], which
//! the thread sets, see `wake::lead_ns`), and the sleeping thread wakes then,
//! not before: the packet is sent by a thread that was going to wake for it
//! anyway (then once more, a short sleep to its spin, see `wake::APPROACH_NS`).
//!
//! Waking now is an eventfd, like an unpark: a wake before the wait makes the
//! wait return at once. The thread waits in one `ppoll` on both, with its
//! own timeout (`ppoll`'s, an hrtimer like a timed park's).
//!
//! Invariants (one arming thread per waker: the live stage; the stop paths
//! only wake now):
//! - `armed_ns` is the instant armed and not yet taken by the thread
//!   (`u64::MAX`: none). The stage arms only when nothing is armed or its
//!   instant is earlier: a later one would move a pending wake-up back, and
//!   the thread, once awake, waits for every later release itself.
//! - No wake-up is lost between them: the thread marks the timer taken
//!   (`armed_ns = MAX`) and then looks at its line (with a full fence between,
//!   [`Waker::wait`]); the stage stores its frame and then looks at
//!   `armed_ns` (with a fence, `live::Outputs::hand_out`). Either the stage
//!   sees nothing armed and arms, or the thread sees the frame.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// What ended a [`Waker::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Woke {
    /// The wait's own timeout.
    Timeout,
    /// A wake now ([`Waker::wake`]), or a signal.
    Now,
    /// The stage's timer, armed for this instant ([`Waker::wake_at`]).
    Timer(u64),
}

/// One output thread's sleep (see the module doc).
pub(super) struct Waker {
    event: OwnedFd,
    timer: OwnedFd,
    armed_ns: AtomicU64,
    /// How long before a release the thread wants to be woken, ns.
    lead_ns: AtomicU64,
}

impl Waker {
    pub fn new() -> Result<Waker, String> {
        // Safety: eventfd and timerfd_create take no pointers.
        let event = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        let event = owned(event, "an eventfd")?;
        // Safety: as above.
        let timer = unsafe {
            libc::timerfd_create(libc::CLOCK_REALTIME, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC)
        };
        let timer = owned(timer, "a timerfd")?;
        Ok(Waker {
            event,
            timer,
            armed_ns: AtomicU64::new(u64::MAX),
            lead_ns: AtomicU64::new(super::wake::APPROACH_NS),
        })
    }

    /// Wakes the thread now, or makes its next wait return at once.
    pub fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // Safety: writes 8 bytes from a live buffer to an owned eventfd; a
        // full counter (EAGAIN) means the thread is woken already.
        let _ = unsafe { libc::write(self.event.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    /// For the stage: makes the thread wake by `at_ns` (the data plane's
    /// clock) at the latest, unless an earlier instant is armed and not yet
    /// taken; at or before `now_ns`, wakes it now.
    pub fn wake_at(&self, at_ns: u64, now_ns: u64) {
        if at_ns <= now_ns {
            self.wake();
            return;
        }
        if self.armed_ns.load(Ordering::SeqCst) <= at_ns {
            return;
        }
        self.armed_ns.store(at_ns, Ordering::SeqCst);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (at_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (at_ns % 1_000_000_000) as libc::c_long,
            },
        };
        // Safety: a valid itimerspec; the old value may be null.
        let r = unsafe {
            libc::timerfd_settime(
                self.timer.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if r != 0 {
            // Never expected (a valid descriptor and time); a wake now costs
            // the hand-over wake-up, not the packet.
            self.wake();
        }
    }

    /// How long before a release the thread wants to be woken, ns.
    pub fn lead_ns(&self) -> u64 {
        self.lead_ns.load(Ordering::Relaxed)
    }

    /// For the thread: sets [`Waker::lead_ns`].
    pub fn set_lead_ns(&self, ns: u64) {
        self.lead_ns.store(ns, Ordering::Relaxed);
    }

    /// For the thread: waits `timeout_ns` at most (None: until woken),
    /// unless `go_on()`, asked after the thread announced its wait (its
    /// caller's flags, set before) and a full fence, says there is work
    /// already. Drains what woke it.
    pub fn wait(&self, timeout_ns: Option<u64>, go_on: impl FnOnce() -> bool) -> Woke {
        std::sync::atomic::fence(Ordering::SeqCst);
        if go_on() {
            return Woke::Now;
        }
        let mut fds = [
            libc::pollfd {
                fd: self.event.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.timer.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ts = timeout_ns.map(|ns| libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        });
        let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const _);
        // Safety: two valid pollfds; the timeout is a live timespec or null
        // (no timeout); no signal mask.
        let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, ts_ptr, std::ptr::null()) };
        if n <= 0 {
            // 0: the timeout; < 0: a signal, which the caller's loop treats
            // as any early wake.
            return if n == 0 { Woke::Timeout } else { Woke::Now };
        }
        let mut buf = [0u8; 8];
        let mut woke = Woke::Now;
        if fds[1].revents != 0 {
            // Safety: reads 8 bytes into a live buffer from an owned timerfd
            // (non-blocking: EAGAIN when re-armed for later meanwhile).
            let r = unsafe { libc::read(self.timer.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
            if r == 8 {
                let at = self.armed_ns.swap(u64::MAX, Ordering::SeqCst);
                // Before the caller looks at its line (see the module doc).
                std::sync::atomic::fence(Ordering::SeqCst);
                woke = Woke::Timer(at);
            }
        }
        if fds[0].revents != 0 {
            // Safety: as above, from an owned eventfd.
            let _ = unsafe { libc::read(self.event.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
            woke = Woke::Now;
        }
        woke
    }
}

/// The descriptor a creating call returned (`fd`), owned, or why not.
fn owned(fd: libc::c_int, what: &str) -> Result<OwnedFd, String> {
    if fd < 0 {
        return Err(format!(
            "cannot create {what} for an output thread: {}",
            std::io::Error::last_os_error()
        ));
    }
    // Safety: a valid descriptor just created and owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock;
    use std::sync::Arc;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_wake_before_the_wait_ends_it_at_once() {
        let w = Waker::new().unwrap();
        w.wake();
        assert_eq!(w.wait(Some(1_000 * MS), || false), Woke::Now);
        assert_eq!(w.wait(Some(MS), || false), Woke::Timeout, "drained");
        assert_eq!(w.wait(None, || true), Woke::Now, "work found: no wait");
    }

    #[test]
    fn the_stage_wakes_a_sleeping_thread_at_the_instant_it_armed() {
        let w = Arc::new(Waker::new().unwrap());
        let t = {
            let w = w.clone();
            std::thread::spawn(move || {
                let woke = w.wait(None, || false);
                (woke, clock::now_ns())
            })
        };
        std::thread::sleep(Duration::from_millis(5));
        let now = clock::now_ns();
        let at = now + 20 * MS;
        w.wake_at(at, now);
        // A later instant does not move it back.
        w.wake_at(at + 500 * MS, now);
        let (woke, woke_ns) = t.join().unwrap();
        assert_eq!(woke, Woke::Timer(at));
        assert!(woke_ns >= at, "not before the instant armed");
        assert!(woke_ns < at + 400 * MS, "not at the later instant");
        assert_eq!(w.armed_ns.load(Ordering::SeqCst), u64::MAX, "taken");
    }

    #[test]
    fn an_earlier_instant_moves_the_wake_up_forward() {
        let w = Waker::new().unwrap();
        let now = clock::now_ns();
        w.wake_at(now + 2_000 * MS, now);
        w.wake_at(now + 10 * MS, now);
        assert_eq!(
            w.wait(Some(1_000 * MS), || false),
            Woke::Timer(now + 10 * MS)
        );
        // Due already: a wake now.
        w.wake_at(now, now + 1);
        assert_eq!(w.wait(Some(1_000 * MS), || false), Woke::Now);
    }
}

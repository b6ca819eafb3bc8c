//! One pair's output side as the live stage sends on it: what it sends itself
//! and what it wakes the output stage for.

use super::*;

/// One pair's output side, as the live stage sends on it (see the `output`
/// module doc).
pub(super) struct Outputs {
    pub(super) outlets: [Arc<Outlet>; 2],
    /// Per direction, the release the stage took on itself: it goes round its
    /// loop (taking frames) until then, and sends it.
    pub(super) claimed: [Option<u64>; 2],
}

impl Outputs {
    /// Frames of one direction the stage sends per turn at most; more due at
    /// once go to the output thread. Sending runs the receiving host's kernel
    /// path inside the send call (veth), so a stage that sent a bulk flow's
    /// every frame did the work of both cores on one: bulk TCP through
    /// `delay 0` fell to a third (188-195 against 558-618 Mbit/s, numbers.md).
    /// A few frames cover what waits for the stage's sends (a ping, an ACK, a
    /// request's first segments); a super-frame stored whole counts its
    /// wire frames, so the stage leaves it to the output thread (sending 64
    /// KiB to a veth runs the receiving host's stack in the send call: with
    /// the stage sending them, it took 86 % of linkem's cycles against the
    /// output thread's 12 % under bulk TCP, numbers.md), except one per turn
    /// while that thread is parked ([`Outlet::send_due_with`]): waking it
    /// for each super-frame cost more.
    pub(super) const STAGE_SHARE_FRAMES: usize = 4;

    pub(super) fn new(outlets: [Arc<Outlet>; 2]) -> Outputs {
        Outputs {
            outlets,
            claimed: [None; 2],
        }
    }

    /// For each direction that got frames (`pushed`) or whose claimed
    /// release may be due: sends what is due by now, takes on the next
    /// release when the output thread could not wake for it in time or is
    /// parked and the release near ([`who_sends`]), and otherwise wakes the
    /// output thread if parked.
    /// Returns how many frames the stage sent itself.
    pub(super) fn hand_out(&mut self, pushed: [bool; 2]) -> Result<usize, String> {
        let mut stage_sent = 0;
        for (i, outlet) in self.outlets.iter().enumerate() {
            if !pushed[i] && self.claimed[i].is_none() {
                continue;
            }
            let c = outlet.control();
            // The output thread is awake and sending (it last found a frame
            // due, and neither waits for a later release nor parks): what is
            // due now is its, as under bulk traffic, which then keeps the
            // output thread's core and its super-frames.
            let output_sending = self.claimed[i].is_none()
                && c.output_ready_ns.load(Ordering::Relaxed) <= clock::now_ns();
            // `leaves_ns`: the release the stage leaves to the output thread, if known.
            let (wake, sent, leaves_ns) = if output_sending {
                (true, 0, None)
            } else {
                self.claimed[i] = None;
                // A parked output thread is not woken for one super-frame.
                let parked = c.output_parked.load(Ordering::Acquire);
                let (left, sent) =
                    outlet.send_due_with(&mut clock::now_ns, Self::STAGE_SHARE_FRAMES, parked)?;
                let now_ns = clock::now_ns();
                let wake = match left {
                    Left::Empty => false,
                    Left::Busy => pushed[i],
                    // More due than the stage's share, or a super-frame
                    // stored whole (bulk): the output thread's.
                    Left::Next(release_ns) if release_ns <= now_ns => true,
                    Left::Bulk(_) => true,
                    Left::Next(release_ns) => {
                        let mine = who_sends(
                            release_ns,
                            now_ns,
                            c.output_wake_ns.load(Ordering::Relaxed),
                            c.output_ready_ns.load(Ordering::Relaxed),
                            STAGE_HORIZON_NS,
                        ) == Sender::Stage;
                        if mine {
                            self.claimed[i] = Some(release_ns);
                        }
                        !mine
                    }
                };
                let leaves_ns = match left {
                    Left::Next(r) | Left::Bulk(r) => Some(r),
                    Left::Empty | Left::Busy => None,
                };
                (wake, sent, leaves_ns)
            };
            stage_sent += sent;
            if wake {
                // Pairs with the output stage's fence (see `output::idle`).
                std::sync::atomic::fence(Ordering::SeqCst);
                // Waiting in a timed park for a later release (or for one
                // not known here), it is woken as when parked idle.
                let waits_ns = c.output_waits_ns.load(Ordering::Relaxed);
                if c.output_parked.load(Ordering::Acquire)
                    || leaves_ns.is_none_or(|r| r < waits_ns) && waits_ns != u64::MAX
                {
                    // Woken when it wants to be for that release (at once
                    // when not known), not now only to go back to sleep.
                    let at_ns = leaves_ns.map_or(0, |r| r.saturating_sub(c.waker.lead_ns()));
                    c.waker.wake_at(at_ns, clock::now_ns());
                }
            } else if sent > 0
                && c.output_asleep.load(Ordering::Relaxed)
                && !outlet.publish_for_asleep(clock::now_ns())
            {
                // Its counts now wait for it to publish them (`output::idle`).
                c.waker.wake();
            }
        }
        Ok(stage_sent)
    }

    /// The earliest release the stage took on, if any.
    pub(super) fn next_claimed_ns(&self) -> Option<u64> {
        self.claimed.iter().flatten().min().copied()
    }
}

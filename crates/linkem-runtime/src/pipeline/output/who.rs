//! Who sends a direction's next frame, the live stage or the output thread:
//! the decision alone, pure (the callers are `live::Outputs::hand_out`, and
//! this module's tests).

#[cfg(doc)]
use super::super::wait::WakeEstimate;

/// Who sends a frame released at `release_ns`, the earliest waiting in its
/// direction (anything stored before it with an earlier release leaves
/// first: both senders take from one source, see the `output` module doc), looked at
/// by the live stage at `now_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::pipeline) enum Sender {
    /// The live stage: it goes round its loop (sleeping in its poll when the
    /// release is further than its own spin) and sends it then, instead of
    /// waking the output thread for it.
    Stage,
    /// The output thread: awake for this release or an earlier one (it is
    /// going to wake then anyway), or the release is far enough off that a
    /// hand-over costs nothing in precision.
    Output,
}

/// How far ahead the live stage takes on the next release of a direction
/// whose output thread is parked ([`who_sends`]): waking the parked thread
/// for it would cost a hand-over (an unpark, the other core woken, its own
/// timed sleep) where the stage, which must wake for the next arrival anyway,
/// sleeps in its poll until then: one wake-up per packet instead of two or
/// three for small delays on sparse traffic. Beyond it (a long delay, where
/// packets keep arriving while earlier ones wait) the output thread is woken
/// once and stays awake while the line holds frames, as under bulk traffic.
pub const STAGE_HORIZON_NS: u64 = 1_000_000;

/// Who sends the frame released at `release_ns`, looked at `now_ns` (the
/// decision of [`Sender`]): the output thread when it is awake for an
/// earlier or the same release (`output_ready_ns`: the release it waits
/// for, the instant it last found a frame due, or `u64::MAX` when parked);
/// else the live stage when the release is due before the output thread
/// could be woken for it (`wake_ns`, its learnt wake-up,
/// [`WakeEstimate::spin_ns`]), or, with the output thread parked, within
/// `horizon_ns` ([`STAGE_HORIZON_NS`]); else the output thread.
#[inline]
pub(in crate::pipeline) fn who_sends(
    release_ns: u64,
    now_ns: u64,
    wake_ns: u64,
    output_ready_ns: u64,
    horizon_ns: u64,
) -> Sender {
    if output_ready_ns <= release_ns {
        return Sender::Output;
    }
    let reach_ns = if output_ready_ns == u64::MAX {
        wake_ns.max(horizon_ns)
    } else {
        wake_ns
    };
    if release_ns <= now_ns.saturating_add(reach_ns) {
        Sender::Stage
    } else {
        Sender::Output
    }
}

/// [`who_sends`] without the parked output thread's horizon: whether the
/// stage sends because the release is closer than a wake-up.
#[cfg(test)]
pub(in crate::pipeline) fn stage_sends(
    release_ns: u64,
    now_ns: u64,
    wake_ns: u64,
    output_ready_ns: u64,
) -> bool {
    who_sends(release_ns, now_ns, wake_ns, output_ready_ns, 0) == Sender::Stage
}

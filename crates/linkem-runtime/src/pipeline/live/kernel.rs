//! Each direction's kernel path ([`crate::port::KernelPath`],
//! `linkem_io::kernel_path`):
//! the kernel forwards the direction's frames itself, in the sender's
//! context, while the model would leave every one as it came at the instant
//! it came.
//!
//! - **When.** A direction uses it while its link is a pass-through
//!   ([`LiveModel::passes_through`]: no delay, rate, loss, or anything a
//!   packet could meet), nothing must see each frame (no tap: `--record`,
//!   `--events`; a model that reads headers, i.e. rules; a port that lends
//!   frames, i.e. host mode), its receive port has a kernel path and its
//!   send port an interface to forward to, and that interface is not known
//!   to be down (the other receive port's health: AF_PACKET hears of it;
//!   linkem counts the frames `tx-error` where the kernel would drop them
//!   after the tc program counted them forwarded). For such a link every packet's
//!   fate is `delivered` with release = arrival and draws nothing from the
//!   random streams, so the model would decide each one exactly as the
//!   kernel does, and the model's state after them is the same as without
//!   them.
//! - **At start** a pass-through is switched on before the pair is ready
//!   (`PairLoop::new`): the first switch attaches the tc program, which
//!   takes the kernel's RTNL lock for milliseconds.
//! - **Switching on** waits until the direction holds nothing: this turn took
//!   no frame from the port, and every packet stored was sent, late, too big
//!   or flushed by the output stage's published counts (which lag: they may
//!   delay the switch, never hasten it; the stage publishes a parked output
//!   thread's counts itself rather than wait for them,
//!   [`Outlet::publish_for_asleep`]). Frames forwarded by the kernel then
//!   never overtake frames linkem still holds (but one that reached the port
//!   between that look and the switch, microseconds). Until then the stage
//!   looks again every [`KERNEL_RETRY_NS`].
//! - **Switching off** is at once, in the turn that applied the change that
//!   made the link do something: frames from then on go to the model.
//! - **Counts.** What the kernel forwarded is added to the direction's counts
//!   when they are read ([`super::super::Direction::stats`]): frames to
//!   `received`, the wire frames a super-frame becomes to `segmented`, and
//!   every wire frame to `delivered`, its bytes to `received_bytes` and
//!   `delivered_bytes`. They have no lateness or delay sample: they left at
//!   the instant they came. A frame longer than the egress MTU allows is
//!   dropped by the tc program and counted `too-big`, as linkem would.

use super::*;

/// How often a direction waiting to switch its kernel path on looks again:
/// each look is a wake-up of the stage.
pub(super) const KERNEL_RETRY_NS: u64 = 10_000_000;

/// One direction's kernel path state, on the stage's thread.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct KernelSide {
    /// The interface the direction sends out of; `None`: no kernel path
    /// (the receive port has none, or the send port is not an interface, or
    /// switching failed once).
    pub(super) egress: Option<u32>,
    /// Switched on.
    pub(super) engaged: bool,
}

/// Whether each side's direction may use its kernel path under the model
/// and stage as they are now; `down[side]`: that side's interface is known
/// to be down. A direction leaves through the other side's interface: while
/// that one is down its frames come to linkem, which counts them tx-error
/// (the kernel would drop them after the tc program counted them forwarded).
pub(super) fn wanted<M: LiveModel>(model: &M, stage: &Stage, down: [bool; 2]) -> [bool; 2] {
    [0, 1].map(|side| {
        stage.tap.is_none()
            && !stage.reads_headers
            && !stage.wants_discards[side]
            && !down[1 - side]
            && model.passes_through(side)
    })
}

/// Switches `side`'s kernel path off if `want` is false; says why once if
/// that fails (the direction then keeps its frames in the kernel path: the
/// error is the pair's, which stops).
pub(super) fn switch_off(
    k: &mut KernelSide,
    port: &mut dyn RxPort,
    want: bool,
) -> Result<(), String> {
    if !k.engaged || want {
        return Ok(());
    }
    k.engaged = false;
    match port.kernel_path() {
        Some(path) => path
            .disengage()
            .map_err(|e| format!("switching the kernel path off: {e}")),
        None => Ok(()),
    }
}

/// Switches `side`'s kernel path on when `want` and the direction holds
/// nothing (`taken`: frames this turn took from its port; `accepted`:
/// packets the stage stored in its delay line). Returns whether to look
/// again later.
pub(super) fn switch_on(
    k: &mut KernelSide,
    port: &mut dyn RxPort,
    outlet: &Outlet,
    want: bool,
    taken: usize,
    accepted: u64,
) -> bool {
    let Some(egress) = k.egress.filter(|_| want && !k.engaged) else {
        return false;
    };
    if taken > 0 {
        return true;
    }
    let control = outlet.control();
    if control.output_done() != accepted {
        // What lags may be only the publication of a parked output thread
        // (it publishes 10-50 ms after its last send): the stage publishes
        // them itself, under the outlet's lock.
        let parked = control.output_parked.load(Ordering::Acquire);
        if !(parked
            && outlet.publish_for_asleep(clock::now_ns())
            && control.output_done() == accepted)
        {
            return true;
        }
    }
    let Some(path) = port.kernel_path() else {
        k.egress = None;
        return false;
    };
    match path.engage(egress) {
        Ok(()) => k.engaged = true,
        Err(e) => {
            eprintln!("linkem: the kernel path stays off: {e}");
            k.egress = None;
        }
    }
    false
}

//! Coalescing on transmit: the output stage hands the receiving host, as one
//! super-frame with its offload header, consecutive TCP wire frames of one
//! flow whose releases fall within a window (the rule of merging is GRO's,
//! [`linkem_core::wire::coalesce`]).
//!
//! Decisions stay per wire frame: the model, the delay line and every count
//! see wire frames, and a frame takes part only once it is due and not
//! dropped (late or flushed). A super-frame holds only frames that are
//! consecutive in this output's release order: any frame that cannot join
//! (another flow, a gap in sequence left by a loss, a duplicate copy, a
//! reordered frame, a corrupt frame whose checksum no longer verifies, a
//! CE-marked frame among unmarked ones) sends what is held first, so nothing
//! overtakes anything. A frame the live stage cut from a super-frame (and
//! so checksummed itself) and did not corrupt is flagged in its delay-line
//! record, and its checksum is not verified again here (it was 5 % of
//! linkem's cycles under bulk TCP, docs/numbers.md); every other frame's is.
//!
//! Timing: let `r0` be the release time of the first frame held. A frame due
//! at `r <= r0 + window` may join; the held frames leave when the next frame
//! due is later than `r0 + window` (or none is waiting), when one cannot
//! join, or when the super-frame is full (64 frames or 64 KiB). So a frame
//! leaves at most `window` after its release, plus the wait for a wake-up.
//! Lateness is recorded for each frame against its own release time when the
//! super-frame leaves. Without `rate`, the segments of one TSO burst share
//! one release time and leave whole with any window, 0 included; for the
//! plain link the live stage then stores the burst whole in the first place
//! and the output stage sends it as it is, with no merging here (the `live`
//! module doc, "Whole pass-through"); what is held here leaves before it.
//!
//! The default window, [`DEFAULT_WINDOW_NS`] = 20 µs: a receiver's GRO
//! merges what one NAPI poll hands it (at most 64 frames, `napi_gro_flush` at
//! the end of each poll), and a NIC raises one interrupt per interrupt
//! moderation period (`rx-usecs`: 8-50 µs as drivers ship, e.g. mlx5 8 µs
//! adaptive, ixgbe ~10-50 µs dynamic), so frames that arrive within about
//! that period are merged by the host anyway. Holding a frame up to 20 µs
//! for that is what the real NIC would have done to it; at 5 Gbit/s it
//! gathers ~8 MSS frames, a 64 KiB super-frame taking 105 µs to arrive.

use linkem_core::wire::coalesce::MAX_SEGMENTS;
use linkem_core::wire::{Coalescer, Offload, TcpSegment};

/// Default coalescing window (see the module doc).
pub const DEFAULT_WINDOW_NS: u64 = 20_000;

/// What became of a frame offered to [`Pending::offer`].
pub(super) enum Offer {
    /// Held in the super-frame being built.
    Joined,
    /// A candidate that cannot join what is held: send what is held, then
    /// [`Pending::start`] with it.
    StartsNew(TcpSegment),
    /// Never merged: send what is held, then send this frame alone.
    Alone,
}

/// The super-frame being built by one output stage.
pub(super) struct Pending {
    co: Coalescer,
    window_ns: u64,
    /// Release times of the frames held, in order.
    releases: Vec<u64>,
}

impl Pending {
    pub fn new(window_ns: u64) -> Self {
        Pending {
            co: Coalescer::new(),
            window_ns,
            releases: Vec::with_capacity(MAX_SEGMENTS),
        }
    }

    /// Offers a due frame (not a duplicate copy); `checksummed`: its TCP
    /// checksum was computed by the live stage, which cut it, and the frame
    /// not changed since, so it is not verified again
    /// ([`TcpSegment::of_checksummed`]); any other frame is.
    pub fn offer(&mut self, frame: &[u8], release_ns: u64, checksummed: bool) -> Offer {
        let seg = if checksummed {
            TcpSegment::of_checksummed(frame)
        } else {
            TcpSegment::of(frame)
        };
        let Some(seg) = seg else {
            return Offer::Alone;
        };
        let in_window = !self.co.is_empty()
            && self
                .releases
                .first()
                .is_some_and(|&r0| release_ns <= r0.saturating_add(self.window_ns));
        if in_window && self.co.append(frame, seg) {
            self.releases.push(release_ns);
            return Offer::Joined;
        }
        Offer::StartsNew(seg)
    }

    /// Starts a new super-frame with `frame` (after what was held was sent).
    pub fn start(&mut self, frame: &[u8], seg: TcpSegment, release_ns: u64) {
        debug_assert!(self.co.is_empty());
        self.co.start(frame, seg);
        self.releases.clear();
        self.releases.push(release_ns);
    }

    /// Whether the held frames must leave now: full, or no frame that could
    /// still join is due within the window (`next_ns`: the next release
    /// waiting, if any).
    pub fn must_leave(&self, next_ns: Option<u64>) -> bool {
        let Some(&r0) = self.releases.first().filter(|_| !self.co.is_empty()) else {
            return false;
        };
        self.co.segments() >= MAX_SEGMENTS
            || next_ns.is_none_or(|n| n > r0.saturating_add(self.window_ns))
    }

    /// Takes what is held: the frame to send (a super-frame with its
    /// offload, or one wire frame with none) and the release times of the
    /// wire frames in it. `None` when nothing is held.
    pub fn take(&mut self) -> Option<(&[u8], Offload, &[u64])> {
        let (frame, offload) = self.co.finish()?;
        Some((frame, offload, &self.releases))
    }
}

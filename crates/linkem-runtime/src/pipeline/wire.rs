//! Turning received frames into wire frames: cutting super-frames
//! ([`cut`]) and finishing checksums the sender left to the hardware
//! ([`finish`]), for the live stage (`super::live`).
//!
//! A received frame is one of:
//! - a super-frame (TSO/GSO/USO from the host, or merged by GRO on linkem's own
//!   interface; `offload.gso` set): cut with [`linkem_core::wire::segment`] into
//!   frames of at most the egress `max_frame_bytes` *before* the model sees it,
//!   so rate, queue limits, loss and duplication apply per wire frame; the
//!   extra frames are counted in `segmented`;
//! - a frame whose L4 checksum the sender left to the hardware (`offload.csum`):
//!   finished in its delay-line record as it is stored (no extra copy);
//! - any other frame: stored unchanged.
//!
//! A TCP super-frame that may instead cross whole ([`whole_plan`], the
//! `live` module doc) is planned, not cut, unless the decisions of its wire
//! frames differ.
//!
//! A frame longer than the egress can send (after cutting) is `too-big`: it is
//! never truncated and never reaches the model, as a real link would never have
//! carried it.

use crate::port::RxFrame;
use linkem_core::wire::headers::TCP_CWR;
use linkem_core::wire::{
    complete_checksum, segment, segment_plan, CsumPartial, Gso, GsoKind, Offload, SegmentPlan,
    WireError,
};

/// How often the kernel's receive drop count is read under continuous traffic.
pub(super) const KERNEL_DROPS_EVERY_NS: u64 = 100_000_000;

/// What is left to do to a wire frame's L4 checksum as it is stored, and
/// whether linkem computed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Csum {
    /// Stored as it came: complete (or broken) as the sender made it, so
    /// whoever would rely on it verifies it.
    AsCame,
    /// Left to the hardware by the sender: finished as the frame is stored.
    Finish(CsumPartial),
    /// Computed by linkem as it cut the frame from a super-frame
    /// ([`segment`]; a UDP/IPv4 segment sent without checksum keeps 0).
    Computed,
}

impl Csum {
    /// What the offload metadata of a frame stored uncut asks for.
    pub fn of(partial: Option<CsumPartial>) -> Csum {
        partial.map_or(Csum::AsCame, Csum::Finish)
    }
}

/// What one received frame became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Cut {
    /// Wire frames handed to `emit`.
    pub wire_frames: u64,
    /// The frame (or what remained of it after `wire_frames` segments) could
    /// not be sent whole: one `too-big`.
    pub too_big: bool,
    /// Why a super-frame could not be cut, if it could not (it was then sent as
    /// it came when it fit, else counted too big).
    pub uncut: Option<WireError>,
}

impl Cut {
    /// Extra frames beyond the one received: every emitted frame and the
    /// too-big rest each take a fate.
    pub fn segmented(&self) -> u64 {
        (self.wire_frames + self.too_big as u64).saturating_sub(1)
    }
}

/// Turns a received frame into the frames that would have crossed a wire,
/// calling `emit` with each one's bytes and the checksum still to finish.
pub(super) fn cut(
    frame: &RxFrame<'_>,
    max_frame_bytes: usize,
    emit: &mut dyn FnMut(&[u8], Csum),
) -> Cut {
    let data = frame.data;
    if (data.len() as u64) < frame.orig_len as u64 {
        // Cut short by the backend: the rest of it is gone.
        return Cut {
            wire_frames: 0,
            too_big: true,
            uncut: None,
        };
    }
    if frame.offload.gso.is_some() {
        let mut emitted = 0u64;
        let result = segment(data, frame.offload, max_frame_bytes, &mut |seg| {
            emitted += 1;
            emit(seg, Csum::Computed)
        });
        let uncut = result.err();
        if uncut.is_none() && emitted > 0 {
            return Cut {
                wire_frames: emitted,
                too_big: false,
                uncut,
            };
        }
        // Metadata that does not fit the frame: a frame that fits is sent as it
        // came (a cable would carry it too); one that does not is too big.
        if emitted == 0 && data.len() <= max_frame_bytes {
            emit(data, Csum::of(frame.offload.csum));
            return Cut {
                wire_frames: 1,
                too_big: false,
                uncut,
            };
        }
        return Cut {
            wire_frames: emitted,
            too_big: true,
            uncut,
        };
    }
    if data.len() > max_frame_bytes {
        return Cut {
            wire_frames: 0,
            too_big: true,
            uncut: None,
        };
    }
    emit(data, Csum::of(frame.offload.csum));
    Cut {
        wire_frames: 1,
        too_big: false,
        uncut: None,
    }
}

/// Copies a wire frame into its delay-line record and finishes the checksum
/// the sender left to the hardware. Offsets that do not fit the frame leave it
/// as it came: a cable would carry it unchanged too.
pub(super) fn finish(slot: &mut [u8], bytes: &[u8], csum: Csum) {
    slot.copy_from_slice(bytes);
    if let Csum::Finish(c) = csum {
        let _ = complete_checksum(slot, c);
    }
}

/// Whether a received frame is a TCP super-frame that may be stored whole
/// (see the `live` module doc) for an egress of `max_frame_bytes`: received
/// in full, cut by `segment` into at least two frames with no Ethernet
/// padding after the datagram, its TCP checksum left to finish at the TCP
/// header (as the host's TSO leaves it, which the sending kernel then
/// finishes per segment), without CWR. Returns how it is cut and the offload to send it
/// with: the received one, with the segment size the egress allows (a
/// smaller MTU than the sender's cuts smaller segments).
pub(super) fn whole_plan(
    frame: &RxFrame<'_>,
    max_frame_bytes: usize,
) -> Option<(SegmentPlan, Offload)> {
    let gso = frame.offload.gso?;
    let csum = frame.offload.csum?;
    if (frame.data.len() as u64) < frame.orig_len as u64
        || !matches!(gso.kind, GsoKind::TcpV4 | GsoKind::TcpV6)
    {
        return None;
    }
    let plan = segment_plan(frame.data, frame.offload, max_frame_bytes).ok()?;
    let at_tcp = usize::from(csum.start) == plan.l4_offset && csum.offset == 16;
    // [`Offload`] keeps no ECN bit of the received `gso_type`, so a burst
    // carrying CWR is cut, which keeps CWR on its first wire frame only.
    let cwr = frame
        .data
        .get(plan.l4_offset + 13)
        .is_none_or(|flags| flags & TCP_CWR != 0);
    if plan.segments < 2 || plan.trailer_bytes != 0 || !at_tcp || cwr {
        return None;
    }
    let size = u16::try_from(plan.per_segment_bytes).ok()?;
    Some((
        plan,
        Offload {
            csum: Some(csum),
            gso: Some(Gso { size, ..gso }),
        },
    ))
}

//! The input stage: takes frames from the receive port, turns each into the
//! wire frames it stands for, asks the model for each one's fate and release
//! time, and stores the accepted ones in the delay line.
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
//! A frame longer than the egress can send (after cutting) is `too-big`: it is
//! never truncated and never reaches the model, as a real link would never have
//! carried it.

use super::wait::Realtime;
use super::{Control, DirectionOptions};
use crate::clock;
use crate::delay_line::Producer;
use crate::port::{RxFrame, RxPort};
use linkem_core::wire::{complete_checksum, segment, CsumPartial, WireError};
use linkem_core::{Fate, Link, PacketMeta};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How an idle input stage waits in poll before checking for stop or changes.
const IDLE_WAIT_NS: u64 = 10_000_000;
/// How often the kernel's receive drop count is read under continuous traffic.
pub(super) const KERNEL_DROPS_EVERY_NS: u64 = 100_000_000;

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
    emit: &mut dyn FnMut(&[u8], Option<CsumPartial>),
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
            emit(seg, None)
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
            emit(data, frame.offload.csum);
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
    emit(data, frame.offload.csum);
    Cut {
        wire_frames: 1,
        too_big: false,
        uncut: None,
    }
}

/// The input stage's own counts (the model keeps the rest).
#[derive(Default)]
struct InputCounts {
    received: u64,
    segmented: u64,
    too_big: u64,
    accepted: u64,
    backpressure: u64,
    wakeups: u64,
    kernel_drops: u64,
}

/// What the input stage reads from and writes to.
pub(super) struct Ports {
    pub rx: Box<dyn RxPort>,
    pub producer: Producer,
    /// The egress port's largest frame.
    pub max_frame_bytes: usize,
    /// The output thread, to wake when it is parked.
    pub output: std::thread::Thread,
}

pub(super) fn input_stage(
    control: Arc<Control>,
    opts: DirectionOptions,
    ports: Ports,
    mut realtime: Option<Realtime>,
) {
    let Ports {
        mut rx,
        mut producer,
        max_frame_bytes,
        output,
    } = ports;
    let mut link = Link::new(opts.link, opts.seed, opts.direction);
    let mut c = InputCounts::default();
    let mut warned_too_big = false;
    let mut warned_uncut = false;
    let publish = |link: &Link, c: &InputCounts| {
        let mut shared = control.input.lock().expect("the lock holders never panic");
        let mut counts = *link.counts();
        // The model counted these as delivered; the delay line had no room or
        // the output stage was too far behind.
        counts.set(
            Fate::Delivered,
            counts.get(Fate::Delivered) - c.backpressure,
        );
        counts.set(Fate::Backpressure, c.backpressure);
        counts.set(Fate::TooBig, c.too_big);
        shared.counts = counts;
        shared.received = c.received;
        shared.segmented = c.segmented;
        shared.accepted = c.accepted;
        shared.rx_wakeups = c.wakeups;
        shared.kernel_drops = c.kernel_drops;
    };
    let mut drops_read_ns = 0u64;
    while !control.stop.load(Ordering::Acquire) {
        if control.has_pending.swap(false, Ordering::AcqRel) {
            if let Some((at_ns, cfg)) = control
                .pending
                .lock()
                .expect("the lock holders never panic")
                .take()
            {
                link.reconfigure(at_ns, cfg);
            }
        }
        // Once per batch: while the output stage is more than max-lag behind
        // (stuck on frames due that long ago), new frames would only fill the
        // line to be dropped late, and copying them costs the machine the time
        // it lacks. Counted as backpressure: the emulator, not the link, had no
        // room for them.
        let now = clock::now_ns();
        let behind_ns = now.saturating_sub(control.output_at_ns.load(Ordering::Relaxed));
        let shed = opts.max_lag_ns.is_some_and(|m| behind_ns > m);
        let mut pushed = false;
        let result = rx.rx_batch(opts.batch, &mut |frame| {
            c.received += 1;
            let ts = if frame.ts_ns != 0 {
                frame.ts_ns
            } else {
                clock::now_ns()
            };
            let cut = cut(&frame, max_frame_bytes, &mut |bytes, csum| {
                let v = link.on_arrival(
                    ts,
                    PacketMeta {
                        len_bytes: bytes.len() as u32,
                    },
                );
                if v.fate != Fate::Delivered {
                    return;
                }
                if shed {
                    c.backpressure += 1;
                    return;
                }
                let stored = producer.push_with(v.release_ns, bytes.len(), false, |slot| {
                    finish(slot, bytes, csum);
                    if let Some(bit) = v.corrupt_bit.filter(|b| (b / 8) < slot.len() as u32) {
                        slot[(bit / 8) as usize] ^= 0x80 >> (bit % 8);
                    }
                });
                if !stored {
                    c.backpressure += 1;
                    return;
                }
                c.accepted += 1;
                pushed = true;
                if v.duplicate {
                    // A copy that finds no room is not a lost packet: the original is on its way.
                    let _ = producer.push_with(v.release_ns, bytes.len(), true, |slot| {
                        finish(slot, bytes, csum)
                    });
                }
            });
            c.segmented += cut.segmented();
            if let (Some(e), false) = (&cut.uncut, warned_uncut) {
                warned_uncut = true;
                eprintln!(
                    "linkem: {}: a super-frame the sender left to segment could not be cut \
                     ({e}); it is {} (warned once; turn segmentation offload off on the \
                     sending host for such traffic: ethtool -K DEV tso off gso off)",
                    opts.name,
                    if cut.too_big {
                        "counted too-big"
                    } else {
                        "sent as it came"
                    }
                );
            }
            if cut.too_big {
                c.too_big += 1;
                if !warned_too_big {
                    warned_too_big = true;
                    eprintln!(
                        "linkem: {}: a frame of {} bytes is larger than the egress interface \
                         sends ({max_frame_bytes} bytes with its Ethernet header); such frames are \
                         dropped and counted as too-big (raise the egress MTU to carry them)",
                        opts.name,
                        frame.orig_len.max(frame.data.len() as u32)
                    );
                }
            }
        });
        if now.wrapping_sub(drops_read_ns) > KERNEL_DROPS_EVERY_NS {
            drops_read_ns = now;
            c.kernel_drops = rx.rx_kernel_drops();
        }
        match result {
            Ok(0) => {
                publish(&link, &c);
                if let Some(rt) = realtime.as_mut() {
                    // Failing to return to SCHED_FIFO costs precision, not packets.
                    let _ = rt.wait_mode();
                }
                if let Err(e) = rx.wait_rx(IDLE_WAIT_NS) {
                    control.fail(format!("receive: {e}"));
                    break;
                }
                c.wakeups += 1;
            }
            Ok(n) => {
                if n == opts.batch {
                    // A full batch: frames are waiting; busy for long, it leaves SCHED_FIFO.
                    if let Some(rt) = realtime.as_mut() {
                        rt.busy(now);
                    }
                }
                if pushed && control.output_parked.load(Ordering::Acquire) {
                    output.unpark();
                }
                publish(&link, &c);
            }
            Err(e) => {
                control.fail(format!("receive: {e}"));
                break;
            }
        }
    }
    c.kernel_drops = rx.rx_kernel_drops();
    publish(&link, &c);
    producer.close();
}

/// Copies a wire frame into its delay-line record and finishes the checksum
/// the sender left to the hardware. Offsets that do not fit the frame leave it
/// as it came: a cable would carry it unchanged too.
fn finish(slot: &mut [u8], bytes: &[u8], csum: Option<CsumPartial>) {
    slot.copy_from_slice(bytes);
    if let Some(c) = csum {
        let _ = complete_checksum(slot, c);
    }
}

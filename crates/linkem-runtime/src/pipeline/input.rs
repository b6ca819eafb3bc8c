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

/// The input stage's state between batches: the model, the line, the counts.
struct Stage {
    name: String,
    link: Link,
    producer: Producer,
    max_frame_bytes: usize,
    c: InputCounts,
    warned_too_big: bool,
    warned_uncut: bool,
    /// Something was stored in this batch (the output stage may need waking).
    pushed: bool,
    /// When this stage began taking frames. The sockets open before the stages
    /// start (both interfaces, then the threads: tens of ms), and frames that
    /// arrived meanwhile wait in the ring with their kernel stamps; taken as they
    /// are, their release times lie that far in the past and the output stage
    /// drops them as late. The link comes up when the stage starts: an earlier
    /// stamp counts as arriving then.
    started_ns: u64,
}

impl Stage {
    /// One received frame: cut it into wire frames, admit each, count it.
    fn take(&mut self, frame: RxFrame<'_>, shed: bool) {
        self.c.received += 1;
        let ts = if frame.ts_ns != 0 {
            frame.ts_ns.max(self.started_ns)
        } else {
            clock::now_ns()
        };
        let max = self.max_frame_bytes;
        let r = cut(&frame, max, &mut |bytes, csum| {
            self.admit(ts, bytes, csum, shed)
        });
        self.c.segmented += r.segmented();
        if let (Some(e), false) = (&r.uncut, self.warned_uncut) {
            self.warned_uncut = true;
            let what = if r.too_big {
                "counted too-big"
            } else {
                "sent as it came"
            };
            eprintln!(
                "linkem: {}: a super-frame the sender left to segment could not be cut ({e}); \
                 it is {what} (warned once; turn segmentation offload off on the sending host \
                 for such traffic: ethtool -K DEV tso off gso off)",
                self.name
            );
        }
        if r.too_big {
            self.c.too_big += 1;
            if !self.warned_too_big {
                self.warned_too_big = true;
                eprintln!(
                    "linkem: {}: a frame of {} bytes is larger than the egress interface sends \
                     ({max} bytes with its Ethernet header); such frames are dropped and counted \
                     as too-big (raise the egress MTU to carry them)",
                    self.name,
                    frame.orig_len.max(frame.data.len() as u32)
                );
            }
        }
    }

    /// One wire frame: its fate from the model, and if accepted, into the line.
    fn admit(&mut self, ts: u64, bytes: &[u8], csum: Option<CsumPartial>, shed: bool) {
        let len_bytes = bytes.len() as u32;
        let v = self.link.on_arrival(ts, PacketMeta { len_bytes });
        if v.fate != Fate::Delivered {
            return;
        }
        if shed {
            self.c.backpressure += 1;
            return;
        }
        let stored = self
            .producer
            .push_with(v.release_ns, bytes.len(), false, |slot| {
                finish(slot, bytes, csum);
                if let Some(bit) = v.corrupt_bit.filter(|b| (b / 8) < slot.len() as u32) {
                    slot[(bit / 8) as usize] ^= 0x80 >> (bit % 8);
                }
            });
        if !stored {
            self.c.backpressure += 1;
            return;
        }
        self.c.accepted += 1;
        self.pushed = true;
        if v.duplicate {
            // A copy that finds no room is not a lost packet: the original is on its way.
            let _ = self
                .producer
                .push_with(v.release_ns, bytes.len(), true, |slot| {
                    finish(slot, bytes, csum)
                });
        }
    }

    fn publish(&self, control: &Control) {
        let c = &self.c;
        let mut counts = *self.link.counts();
        // The model counted these as delivered; the delay line had no room or
        // the output stage was too far behind.
        counts.set(
            Fate::Delivered,
            counts.get(Fate::Delivered) - c.backpressure,
        );
        counts.set(Fate::Backpressure, c.backpressure);
        counts.set(Fate::TooBig, c.too_big);
        let mut shared = control.input.lock().expect("the lock holders never panic");
        shared.counts = counts;
        shared.received = c.received;
        shared.segmented = c.segmented;
        shared.accepted = c.accepted;
        shared.rx_wakeups = c.wakeups;
        shared.kernel_drops = c.kernel_drops;
    }
}

/// Applies a link change requested since the last batch.
fn apply_pending(control: &Control, link: &mut Link) {
    if control.has_pending.swap(false, Ordering::AcqRel) {
        let pending = control
            .pending
            .lock()
            .expect("the lock holders never panic")
            .take();
        if let Some((at_ns, cfg)) = pending {
            link.reconfigure(at_ns, cfg);
        }
    }
}

pub(super) fn input_stage(
    control: Arc<Control>,
    opts: DirectionOptions,
    ports: Ports,
    mut realtime: Option<Realtime>,
) {
    let Ports {
        mut rx,
        producer,
        max_frame_bytes,
        output,
    } = ports;
    let mut st = Stage {
        name: opts.name.clone(),
        link: Link::new(opts.link.clone(), opts.seed, opts.direction),
        producer,
        max_frame_bytes,
        c: InputCounts::default(),
        warned_too_big: false,
        warned_uncut: false,
        pushed: false,
        started_ns: clock::now_ns(),
    };
    let mut drops_read_ns = 0u64;
    while !control.stop.load(Ordering::Acquire) {
        apply_pending(&control, &mut st.link);
        // Once per batch: while the output stage is more than max-lag behind
        // (stuck on frames due that long ago), new frames would only fill the
        // line to be dropped late, and copying them costs the machine the time
        // it lacks. Counted as backpressure: the emulator, not the link, had no
        // room for them.
        let now = clock::now_ns();
        let behind_ns = now.saturating_sub(control.output_at_ns.load(Ordering::Relaxed));
        let shed = opts.max_lag_ns.is_some_and(|m| behind_ns > m);
        st.pushed = false;
        let result = rx.rx_batch(opts.batch, &mut |frame| st.take(frame, shed));
        if now.wrapping_sub(drops_read_ns) > KERNEL_DROPS_EVERY_NS {
            drops_read_ns = now;
            st.c.kernel_drops = rx.rx_kernel_drops();
        }
        match result {
            Ok(0) => {
                st.publish(&control);
                if let Some(rt) = realtime.as_mut() {
                    // Failing to return to SCHED_FIFO costs precision, not packets.
                    let _ = rt.wait_mode();
                }
                if let Err(e) = rx.wait_rx(IDLE_WAIT_NS) {
                    control.fail(format!("receive: {e}"));
                    break;
                }
                st.c.wakeups += 1;
            }
            Ok(n) => {
                if n == opts.batch {
                    // A full batch: frames are waiting; busy for long, it leaves SCHED_FIFO.
                    if let Some(rt) = realtime.as_mut() {
                        rt.busy(now);
                    }
                }
                if st.pushed {
                    // Pairs with the output stage's fence between announcing a
                    // park and looking at the line (see `output::idle`).
                    std::sync::atomic::fence(Ordering::SeqCst);
                    if control.output_parked.load(Ordering::Acquire) {
                        output.unpark();
                    }
                }
                st.publish(&control);
            }
            Err(e) => {
                control.fail(format!("receive: {e}"));
                break;
            }
        }
    }
    st.c.kernel_drops = rx.rx_kernel_drops();
    st.publish(&control);
    st.producer.close();
}

/// Copies a wire frame into its delay-line record and finishes the checksum
/// the sender left to the hardware. Offsets that do not fit the frame leave it
/// as it came: a cable would carry it unchanged too.
pub(super) fn finish(slot: &mut [u8], bytes: &[u8], csum: Option<CsumPartial>) {
    slot.copy_from_slice(bytes);
    if let Some(c) = csum {
        let _ = complete_checksum(slot, c);
    }
}

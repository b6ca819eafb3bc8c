//! Arrivals: a received frame cut into wire frames (or crossing whole), each
//! given to the model.

use super::*;

impl Stage {
    /// One frame received on port `side`: cut it, offer each wire frame.
    #[inline]
    pub(super) fn take<M: LiveModel>(
        &mut self,
        model: &mut M,
        objs: &mut Objects,
        side: usize,
        frame: RxFrame<'_>,
    ) {
        self.c[side].received += 1;
        let stamp = if frame.ts_ns != 0 {
            frame.ts_ns.max(self.started_ns)
        } else {
            clock::now_ns()
        };
        self.first_stamp_ns[side].get_or_insert(stamp);
        let after_ns = stamp.saturating_sub(self.last_stamp_ns[side]);
        self.last_stamp_ns[side] = stamp;
        if after_ns >= cadence::SPARSE_NS && self.sparse[side].len() < cadence::FLOWS {
            self.sparse[side].push((cadence::flow_of(frame.data), stamp));
        }
        let ts = self.driver.arrival_ns(stamp);
        let max = self.max_frame[side];
        if self.whole_ok[side] {
            if let Some((plan, offload)) = whole_plan(&frame, max) {
                self.take_whole(model, objs, side, ts, &frame, plan, offload);
                return;
            }
        }
        let owner = frame.owner;
        let r = cut(&frame, max, &mut |bytes, csum| {
            self.admit(model, objs, side, ts, bytes, csum, owner)
        });
        self.c[side].segmented += r.segmented();
        if r.uncut.is_some() || r.too_big {
            self.warn(side, &r, &frame);
        }
    }

    /// A super-frame that may cross whole (`whole_plan` found it fit): each
    /// of its wire frames, by `plan`, goes to the model as `cut` would give
    /// it (same length, stamp and tag, and key when the model reads
    /// headers), and the decisions are kept while each is the plain one of
    /// the first (see `plain_as`); if all are, the super-frame goes into the delay line as
    /// one record. At the first that is not (or a decision of another packet
    /// comes in between), it is cut after all: the frames decided so far are
    /// stored one by one with their decisions, that one and the rest go on
    /// as `admit` takes any wire frame, so what is stored and counted is
    /// what cutting first would have stored, in the same order.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn take_whole<M: LiveModel>(
        &mut self,
        model: &mut M,
        objs: &mut Objects,
        side: usize,
        ts: u64,
        frame: &RxFrame<'_>,
        plan: SegmentPlan,
        offload: Offload,
    ) {
        let n = plan.segments;
        self.c[side].segmented += n as u64 - 1;
        let side_id = if side == 0 { Side::A } else { Side::B };
        let max = self.max_frame[side];
        let mut buf = std::mem::take(&mut self.cut_buf);
        let mut ends = std::mem::take(&mut self.cut_ends);
        let mut decisions = std::mem::take(&mut self.whole_decisions);
        decisions.clear();
        // The tap records each wire frame's bytes: cut first for it.
        let tapped = self.tap.is_some();
        if tapped {
            cut_into(&mut buf, &mut ends, frame, max);
        }
        // Rules read each wire frame's key: derived from the burst's, as the
        // segment would give it (`FlowKey::of_segment`).
        let whole_key = self.reads_headers.then(|| FlowKey {
            owner: frame.owner,
            ..FlowKey::parse(frame.data, L2Kind::Ethernet)
        });
        // The wire frame whose decision differs.
        let mut differs = None;
        for i in 0..n {
            let len_bytes = plan.frame_bytes(i) as u32;
            if let Some(tap) = self.tap.as_mut() {
                tap.frame(side_id, ts, wire_frame(&buf, &ends, i));
            }
            let key = whole_key.map_or_else(FlowKey::default, |k| k.of_segment(&plan, i));
            self.c[side].received_bytes += u64::from(len_bytes);
            let tag = self.driver.offer(model, ts, side_id, len_bytes, key);
            let plain = {
                let mut pending = self.driver.pending();
                match (pending.next(), pending.next()) {
                    (Some(d), None) => d.tag == tag && plain_as(d, decisions.first()),
                    _ => false,
                }
            };
            if !plain {
                differs = Some(i);
                break;
            }
            let (d, _) = self
                .driver
                .next_decision()
                .expect("one decision, looked at above");
            if let Some(tap) = self.tap.as_mut() {
                tap.decision(ts, len_bytes, &d);
            }
            decisions.push(d);
        }
        match differs {
            None => self.store_whole(objs, &decisions, side, ts, frame.data, plan, offload),
            Some(at) => {
                // Wire frame `j` as cutting first would have had it: decided
                // plain before `at`, decided (or held) by the arrival of `at`
                // whose decisions wait in the driver, not yet arrived after.
                let mut each = |stage: &mut Stage, model: &mut M, j: usize, bytes: &[u8]| {
                    let csum = Csum::Computed;
                    match j.cmp(&at) {
                        std::cmp::Ordering::Less => {
                            stage.settle_untapped(objs, &decisions[j], side, ts, bytes, csum)
                        }
                        std::cmp::Ordering::Equal => {
                            stage.settle_arrival(objs, side, ts, bytes, csum)
                        }
                        std::cmp::Ordering::Greater => {
                            stage.admit(model, objs, side, ts, bytes, csum, frame.owner)
                        }
                    }
                };
                if tapped {
                    for j in 0..ends.len() {
                        each(self, model, j, wire_frame(&buf, &ends, j));
                    }
                } else {
                    // Straight from the cut into the delay line, no copy between.
                    let mut j = 0;
                    // `whole_plan` checked what `segment` checks: it does not fail.
                    let _ = segment(frame.data, frame.offload, max, &mut |seg| {
                        each(self, model, j, seg);
                        j += 1;
                    });
                }
            }
        }
        self.cut_buf = buf;
        self.cut_ends = ends;
        self.whole_decisions = decisions;
    }

    /// Stores a super-frame whole for its wire frames' `decisions` (all
    /// delivered with one release, none copied, corrupted or marked):
    /// counted as [`Stage::store`] counts each of them, in one record.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn store_whole(
        &mut self,
        objs: &mut Objects,
        decisions: &[Decision],
        side: usize,
        arrival_ns: u64,
        data: &[u8],
        plan: SegmentPlan,
        offload: Offload,
    ) {
        let Some(first) = decisions.first() else {
            return;
        };
        let n = decisions.len() as u64;
        let group = self.group_of(first.pipe);
        let c = &mut self.c[side];
        for _ in decisions {
            c.fates.add(Fate::Delivered);
        }
        let whole = Whole {
            offload,
            wire_frames: decisions.len() as u32,
        };
        let stored = !self.shed[side]
            && self.controls[side].held.take(group)
            && (self.producers[side].push_whole(first.release_ns, group, whole, data) || {
                self.controls[side].held.give_back(group);
                false
            });
        if stored {
            c.accepted += n;
            let delay_ns = first.release_ns.saturating_sub(arrival_ns);
            c.delays.push((delay_ns, n));
            self.note_stored(side, first.release_ns);
        } else {
            c.backpressure += n;
        }
        if first.pipe.is_some() || first.queue.is_some() {
            for (i, d) in decisions.iter().enumerate() {
                objs.record(d, arrival_ns, plan.frame_bytes(i) as u32, stored);
            }
        }
    }

    #[cold]
    pub(super) fn warn(&mut self, side: usize, r: &Cut, frame: &RxFrame<'_>) {
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
                self.names[side]
            );
        }
        if r.too_big {
            self.c[side].too_big += 1;
            if !self.warned_too_big {
                self.warned_too_big = true;
                eprintln!(
                    "linkem: {}: a frame of {} bytes is larger than the egress interface sends \
                     ({} bytes with its Ethernet header); such frames are dropped and counted \
                     as too-big (raise the egress MTU to carry them)",
                    self.names[side],
                    frame.orig_len.max(frame.data.len() as u32),
                    self.max_frame[side]
                );
            }
        }
    }

    /// One wire frame into the model; its decision (now or when it comes).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn admit<M: LiveModel>(
        &mut self,
        model: &mut M,
        objs: &mut Objects,
        side: usize,
        ts: u64,
        bytes: &[u8],
        csum: Csum,
        owner: Option<SocketOwner>,
    ) {
        let side_id = if side == 0 { Side::A } else { Side::B };
        if let Some(tap) = self.tap.as_mut() {
            tap.frame(side_id, ts, bytes);
        }
        let key = if self.reads_headers {
            FlowKey {
                owner,
                ..FlowKey::parse(bytes, L2Kind::Ethernet)
            }
        } else {
            FlowKey::default()
        };
        self.c[side].received_bytes += bytes.len() as u64;
        self.driver
            .offer(model, ts, side_id, bytes.len() as u32, key);
        self.settle_arrival(objs, side, ts, bytes, csum);
    }
}

/// Whether `d` is a plain decision (delivered, no copy, no corrupt bits, no
/// CE mark) that is the same as `first`'s (release, pipe, queue), when there
/// is a first: the wire frames of a super-frame with such decisions may
/// cross whole.
pub(super) fn plain_as(d: &Decision, first: Option<&Decision>) -> bool {
    d.fate == Fate::Delivered
        && !d.duplicate
        && d.corrupt_bits.is_empty()
        && !d.ce
        && first.is_none_or(|f| {
            (f.release_ns, f.pipe, f.queue, f.side) == (d.release_ns, d.pipe, d.queue, d.side)
        })
}

/// Cuts `frame` (a super-frame `whole_plan` accepted) into `buf`, its wire
/// frames back to back, each one's end in `ends`.
pub(super) fn cut_into(
    buf: &mut Vec<u8>,
    ends: &mut Vec<usize>,
    frame: &RxFrame<'_>,
    max_frame_bytes: usize,
) {
    buf.clear();
    ends.clear();
    // `whole_plan` checked what `segment` checks: it cannot fail here, and
    // a frame it did not emit is an empty one (`wire_frame`), never a panic.
    let _ = segment(frame.data, frame.offload, max_frame_bytes, &mut |seg| {
        buf.extend_from_slice(seg);
        ends.push(buf.len());
    });
}

/// Wire frame `i` of what [`cut_into`] cut.
pub(super) fn wire_frame<'a>(buf: &'a [u8], ends: &[usize], i: usize) -> &'a [u8] {
    let start = if i == 0 {
        0
    } else {
        ends.get(i - 1).copied().unwrap_or(0)
    };
    let end = ends.get(i).copied().unwrap_or(start);
    buf.get(start..end).unwrap_or(&[])
}

//! Decisions acted upon: a delivered frame into its delay line, counts
//! published.

use super::*;

impl Stage {
    /// Settles the decisions the arrival of the packet just offered
    /// (`bytes`) gave: its own, and those of packets held before; the driver
    /// holds it when undecided.
    pub(super) fn settle_arrival(
        &mut self,
        objs: &mut Objects,
        side: usize,
        ts: u64,
        bytes: &[u8],
        csum: Csum,
    ) {
        while let Some((d, frame)) = self.driver.next_decision() {
            match frame {
                Frame::Offered => self.settle(objs, &d, side, ts, bytes, csum),
                other => self.settle_held(objs, &d, other),
            }
        }
        if let Some(tag) = self.driver.undecided() {
            let mut frame = vec![0u8; bytes.len()];
            finish(&mut frame, bytes, csum);
            // Held frames are settled as they came (their checksum is
            // complete now, but not known here to be linkem's).
            self.driver.hold(
                tag,
                Held {
                    side,
                    arrival_ns: ts,
                    frame,
                },
            );
            self.c[side].held += 1;
        }
    }

    /// Runs the model's events due by `now_ns` (from [`Stage::tick`]) and
    /// settles their decisions; arrivals after it are stamped t + 1 at the
    /// earliest ([`Driver::poll`]).
    pub(super) fn poll<M: LiveModel>(&mut self, model: &mut M, objs: &mut Objects, now_ns: u64) {
        self.driver.poll(model, now_ns);
        self.settle_pending(objs);
    }

    /// Settles the decisions waiting in the driver, each of a held packet
    /// (after a poll or a change).
    pub(super) fn settle_pending(&mut self, objs: &mut Objects) {
        while let Some((d, frame)) = self.driver.next_decision() {
            self.settle_held(objs, &d, frame);
        }
    }

    /// Settles decision `d` of a packet held before (`frame`, as the driver
    /// gave it back).
    pub(super) fn settle_held(&mut self, objs: &mut Objects, d: &Decision, frame: Frame<Held>) {
        let Frame::Held(h) = frame else {
            // Every packet is held until decided; a decision without one is
            // the model's error, which must not stop the bridge.
            debug_assert!(false, "a decision for packet {} never held", d.tag);
            return;
        };
        self.c[h.side].held -= 1;
        self.settle(objs, d, h.side, h.arrival_ns, &h.frame, Csum::AsCame);
    }

    /// Applies a decision to a frame received on `side`.
    #[inline]
    pub(super) fn settle(
        &mut self,
        objs: &mut Objects,
        d: &Decision,
        side: usize,
        arrival_ns: u64,
        bytes: &[u8],
        csum: Csum,
    ) {
        if let Some(tap) = self.tap.as_mut() {
            tap.decision(arrival_ns, bytes.len() as u32, d);
        }
        self.settle_untapped(objs, d, side, arrival_ns, bytes, csum);
    }

    /// [`Stage::settle`] of a decision the tap has seen already.
    #[inline]
    pub(super) fn settle_untapped(
        &mut self,
        objs: &mut Objects,
        d: &Decision,
        side: usize,
        arrival_ns: u64,
        bytes: &[u8],
        csum: Csum,
    ) {
        let stored = self.store(d, side, arrival_ns, bytes, csum);
        if d.pipe.is_some() || d.queue.is_some() {
            objs.record(d, arrival_ns, bytes.len() as u32, stored);
        }
    }

    /// Counts the decision for its direction; a delivered packet goes into
    /// the delay line, its delay (release − `arrival_ns`) recorded. Returns
    /// whether it did.
    #[inline]
    pub(super) fn store(
        &mut self,
        d: &Decision,
        side: usize,
        arrival_ns: u64,
        bytes: &[u8],
        csum: Csum,
    ) -> bool {
        let group = if d.fate == Fate::Delivered {
            self.group_of(d.pipe)
        } else {
            0
        };
        let c = &mut self.c[side];
        match d.fate {
            Fate::Delivered => {}
            f => {
                c.fates.add(f);
                self.discard(side, bytes);
                return false;
            }
        }
        c.fates.add(Fate::Delivered);
        c.fates.duplicated += d.duplicate as u64;
        c.fates.corrupted += !d.corrupt_bits.is_empty() as u64;
        if self.shed[side] || !self.controls[side].held.take(group) {
            c.backpressure += 1;
            self.discard(side, bytes);
            return false;
        }
        let fill = |slot: &mut [u8]| {
            finish(slot, bytes, csum);
            d.apply_to_frame(slot, L2Kind::Ethernet);
        };
        // A frame linkem cut (and so checksummed) and did not corrupt is not
        // verified again by the output stage's coalescing (a CE mark changes
        // only the IP header).
        let stored = if csum == Csum::Computed && d.corrupt_bits.is_empty() {
            self.producers[side].push_checksummed(d.release_ns, bytes.len(), group, fill)
        } else {
            self.producers[side].push_with_group(d.release_ns, bytes.len(), false, group, fill)
        };
        if !stored {
            self.controls[side].held.give_back(group);
            c.backpressure += 1;
            self.discard(side, bytes);
            return false;
        }
        c.accepted += 1;
        c.delays.push((d.release_ns.saturating_sub(arrival_ns), 1));
        self.note_stored(side, d.release_ns);
        if d.duplicate && self.controls[side].held.take(group) {
            // The copy leaves as it came, right after the original; one that
            // finds no room is not a lost packet.
            let copied = self.producers[side].push_with_group(
                d.release_ns,
                bytes.len(),
                true,
                group,
                |slot| finish(slot, bytes, csum),
            );
            if !copied {
                self.controls[side].held.give_back(group);
            }
        }
        true
    }

    /// Keeps a frame not sent for its port, when the port wants it back.
    pub(super) fn discard(&mut self, side: usize, bytes: &[u8]) {
        if self.wants_discards[side] {
            self.discards[side].push(bytes.to_vec());
        }
    }

    /// Publishes `side`'s counts, and records the delays of the packets
    /// stored since the last publication into the shared histogram.
    pub(super) fn publish(&mut self, side: usize) {
        let c = &mut self.c[side];
        let mut counts = c.fates;
        counts.set(
            Fate::Delivered,
            counts.get(Fate::Delivered).saturating_sub(c.backpressure),
        );
        counts.set(Fate::Backpressure, c.backpressure);
        counts.set(Fate::TooBig, c.too_big);
        let mut shared = self.controls[side]
            .input
            .lock()
            .expect("the lock holders never panic");
        shared.counts = counts;
        shared.received = c.received;
        shared.received_bytes = c.received_bytes;
        shared.segmented = c.segmented;
        // Packets the model holds are in flight as much as those in the line.
        shared.accepted = c.accepted + c.held;
        shared.rx_wakeups = self.wakes.wakeups;
        shared.rx_on_beat = self.wakes.on_beat;
        shared.rx_yields_lost = self.wakes.yields_lost;
        shared.kernel_drops = c.kernel_drops;
        for (delay_ns, n) in c.delays.drain(..) {
            // 1 ns at least: the histogram's lowest bound (a zero delay is
            // 1 ns); one beyond its highest (100 s) counts as that.
            shared.delay.saturating_record_n(delay_ns.max(1), n);
        }
    }

    /// Publishes both directions' counts; returns which directions got
    /// packets since the last call (to hand out, [`Outputs::hand_out`]).
    pub(super) fn publish_all(&mut self) -> [bool; 2] {
        for i in 0..2 {
            self.publish(i);
        }
        std::mem::take(&mut self.pushed)
    }
}

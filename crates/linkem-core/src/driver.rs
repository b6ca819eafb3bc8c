//! The rules every driver of a [`Model`] keeps (docs/architecture.md, "The
//! rules a driver keeps"), as the one piece of code replay and the live stage
//! both call: each arrival gets the next tag; its stamp is clamped so the
//! model's time never goes back, and to t + 1 after a poll at t; a frame waits
//! by tag until its decision; a change at t is applied after a poll at t.
//!
//! The driver owns no I/O: it hands each decision back with where its frame is
//! ([`Frame`]), and the caller acts on it (writes a capture, fills a delay line).

use crate::model::{Change, ChangeError, Model};
use crate::node::{Decision, PacketIn};
use crate::rules::{FlowKey, Side};
use std::collections::HashMap;

/// Tags, instants and held frames of one model's inputs: see the
/// [module doc](self). `F` is what the caller keeps of a frame the model
/// holds.
#[derive(Debug)]
pub struct Driver<F> {
    next_tag: u64,
    /// The last instant given to the model.
    last_ns: u64,
    /// The earliest instant the next arrival may be given: `last_ns`, or
    /// t + 1 after a poll at t.
    floor_ns: u64,
    /// The tag offered last, until its decision is taken.
    offered: Option<u64>,
    /// Frames of packets the model holds, by tag.
    held: HashMap<u64, F>,
    /// The decisions of the last input, in the model's order; those before
    /// `taken` were handed out. Kept in place until the next input, so the
    /// caller acting on them in place ([`Driver::next_decision_ref`]) copies
    /// none (moving each ~120-byte decision out was a tenth of a replay).
    pending: Vec<Decision>,
    taken: usize,
}

/// Where the frame of a decision taken with [`Driver::next_decision`] is.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<F> {
    /// The packet just offered: its frame is still the caller's, and is not
    /// to be held.
    Offered,
    /// A packet held before: its frame, no longer held.
    Held(F),
    /// A decision for a tag neither offered nor held: the model's error.
    Unknown,
}

/// The instant a request's changes are applied at, made only by
/// [`Driver::begin_changes`] once the model was polled there, so no change
/// reaches the model without the poll before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeInstant {
    at_ns: u64,
}

impl ChangeInstant {
    /// The instant, in the model's time.
    pub fn at_ns(self) -> u64 {
        self.at_ns
    }
}

impl<F> Default for Driver<F> {
    fn default() -> Self {
        Driver::new(0)
    }
}

impl<F> Driver<F> {
    /// A driver whose model's time starts at `start_ns`: no input is given an
    /// earlier instant.
    pub fn new(start_ns: u64) -> Driver<F> {
        Driver {
            next_tag: 0,
            last_ns: start_ns,
            floor_ns: start_ns,
            offered: None,
            held: HashMap::new(),
            pending: Vec::new(),
            taken: 0,
        }
    }

    /// The last instant given to the model.
    #[inline]
    pub fn last_ns(&self) -> u64 {
        self.last_ns
    }

    /// How many frames wait for their decision.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The instant an arrival stamped `stamp_ns` (or a live input read off a
    /// clock at `stamp_ns`) reaches the model: never before an instant given
    /// to it, nor at t after a poll at t (that poll ran the events due at t,
    /// which an arrival at t would precede, so a replay would order them
    /// otherwise). Inputs given at the result may not go before it.
    #[inline]
    pub fn arrival_ns(&mut self, stamp_ns: u64) -> u64 {
        let t = stamp_ns.max(self.floor_ns);
        self.floor_ns = t;
        self.last_ns = t;
        t
    }

    /// The instant a poll or a change meant for `at_ns` reaches the model:
    /// never before an instant given to it (a poll may follow a poll at the
    /// same instant; an arrival may not, see [`Driver::arrival_ns`]).
    #[inline]
    pub fn input_ns(&mut self, at_ns: u64) -> u64 {
        let t = at_ns.max(self.last_ns);
        self.last_ns = t;
        self.floor_ns = self.floor_ns.max(t);
        t
    }

    /// Offers a packet to `model` at `at_ns` (from [`Driver::arrival_ns`])
    /// under the next tag, which it returns; its decisions wait for
    /// [`Driver::next_decision`].
    #[inline]
    pub fn offer<M: Model>(
        &mut self,
        model: &mut M,
        at_ns: u64,
        side: Side,
        len_bytes: u32,
        key: FlowKey,
    ) -> u64 {
        self.start_input();
        debug_assert!(at_ns >= self.last_ns, "an arrival before an instant given");
        let tag = self.next_tag;
        self.next_tag += 1;
        self.offered = Some(tag);
        let pkt = PacketIn {
            len_bytes,
            key,
            side,
            tag,
        };
        model.on_arrival(at_ns, pkt, &mut self.pending);
        tag
    }

    /// The decisions of the last offer, in order, before any is taken: the
    /// caller that may act on them together (a super-frame crossing whole)
    /// looks here first.
    pub fn pending(&self) -> impl Iterator<Item = &Decision> {
        self.pending[self.taken..].iter()
    }

    /// Takes the next decision with where its frame is, in the order the
    /// model gave them.
    #[inline]
    pub fn next_decision(&mut self) -> Option<(Decision, Frame<F>)> {
        let slot = self.pending.get_mut(self.taken)?;
        self.taken += 1;
        let d = std::mem::replace(slot, Decision::delivered(0, Side::A, 0));
        let frame = Self::frame_of(&mut self.offered, &mut self.held, d.tag);
        Some((d, frame))
    }

    /// [`Driver::next_decision`], the decision lent rather than moved out:
    /// for a caller that acts on it in place, the replay's hot path.
    #[inline]
    pub fn next_decision_ref(&mut self) -> Option<(&Decision, Frame<F>)> {
        let d = self.pending.get(self.taken)?;
        self.taken += 1;
        let frame = Self::frame_of(&mut self.offered, &mut self.held, d.tag);
        Some((d, frame))
    }

    /// Where the frame of packet `tag` is: the one just offered, or held.
    #[inline]
    fn frame_of(offered: &mut Option<u64>, held: &mut HashMap<u64, F>, tag: u64) -> Frame<F> {
        if *offered == Some(tag) {
            *offered = None;
            Frame::Offered
        } else {
            match held.remove(&tag) {
                Some(f) => Frame::Held(f),
                None => Frame::Unknown,
            }
        }
    }

    /// Forgets the decisions of the last input, all taken, before the next.
    #[inline]
    fn start_input(&mut self) {
        debug_assert!(self.taken == self.pending.len(), "decisions not taken");
        self.pending.clear();
        self.taken = 0;
    }

    /// The tag offered last, if its decision has not come: its frame is to
    /// be held ([`Driver::hold`]). Asked once every decision was taken.
    #[inline]
    pub fn undecided(&mut self) -> Option<u64> {
        debug_assert!(self.taken == self.pending.len(), "decisions not taken");
        self.offered.take()
    }

    /// Keeps the frame of packet `tag` (from [`Driver::undecided`]) until
    /// its decision.
    pub fn hold(&mut self, tag: u64, frame: F) {
        self.held.insert(tag, frame);
    }

    /// Runs the model's events due by `at_ns` (from [`Driver::input_ns`]):
    /// their decisions wait for [`Driver::next_decision`]. Arrivals after it
    /// are given t + 1 at the earliest.
    pub fn poll<M: Model>(&mut self, model: &mut M, at_ns: u64) {
        self.start_input();
        self.offered = None;
        model.poll(at_ns, &mut self.pending);
        self.floor_ns = self.floor_ns.max(at_ns.saturating_add(1));
    }

    /// Polls the model at `at_ns` (from [`Driver::input_ns`]), as a change
    /// at t must be preceded by: the changes of the request then go in at
    /// the instant returned ([`Driver::apply`]), after the poll's decisions
    /// are taken.
    pub fn begin_changes<M: Model>(&mut self, model: &mut M, at_ns: u64) -> ChangeInstant {
        self.poll(model, at_ns);
        ChangeInstant { at_ns }
    }

    /// Applies `change` at `at`; the decisions it forces wait for
    /// [`Driver::next_decision`]. On error the model did not change.
    pub fn apply<M: Model>(
        &mut self,
        model: &mut M,
        at: ChangeInstant,
        change: Change,
    ) -> Result<(), ChangeError> {
        self.start_input();
        self.offered = None;
        model.apply(at.at_ns, change, &mut self.pending)
    }
}

#[cfg(test)]
mod tests;

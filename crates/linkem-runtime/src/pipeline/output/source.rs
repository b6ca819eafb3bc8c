//! Where the output stage takes its frames from, in release order: the
//! delay line, or a heap fed from it when the link may reorder.

use super::*;

/// A packet moved out of the delay line when the link may reorder.
pub(in crate::pipeline) struct Held {
    pub(in crate::pipeline) frame: Vec<u8>,
    pub(in crate::pipeline) kind: Kind,
}

/// What a record of the delay line is, beside its frame (see [`crate::delay_line::Head`]).
#[derive(Debug, Clone, Copy)]
pub(in crate::pipeline) struct Kind {
    pub(in crate::pipeline) copy: bool,
    pub(in crate::pipeline) group: u32,
    pub(in crate::pipeline) whole: Option<Whole>,
    pub(in crate::pipeline) checksummed: bool,
    /// Ended before its release ([`Source::end_flushed`]): only freed.
    pub(in crate::pipeline) discarded: bool,
}

impl Kind {
    fn of(h: &Head<'_>) -> Kind {
        Kind {
            copy: h.copy,
            group: h.group,
            whole: h.whole,
            checksummed: h.checksummed,
            discarded: h.discarded,
        }
    }
}

/// Where the output stage takes its next frame from: the delay line itself, or
/// (when the link may reorder) a heap ordered by release time fed from it.
///
/// With `sorted_runs` (the node stage), the producer counts in
/// [`Control::out_of_order`] every record whose release is earlier than one it
/// stored before. While that count has not moved, every record in the line is
/// at least as late as every record stored before it, so the line is sorted
/// and no earlier than anything in the heap: frames leave from the line
/// directly, uncopied. When the count moves, the whole line goes into the heap
/// (as without `sorted_runs`), and the frames of the heap leave first.
pub(in crate::pipeline) struct Source {
    pub(in crate::pipeline) consumer: Consumer,
    heap: Option<ReleaseQueue<Held>>,
    sorted_runs: Option<Arc<Control>>,
    /// The out-of-order count already moved into the heap.
    handled: u64,
    /// How long before its release each frame is handed over: the port's
    /// send lead ([`OutletInner::next_release`]).
    lead_ns: u64,
}

impl Source {
    /// The source of a direction whose stage runs with `cfg` (as
    /// [`Outlet::new`] builds it).
    pub(in crate::pipeline) fn new(
        consumer: Consumer,
        cfg: &OutputConfig,
        control: &Arc<Control>,
    ) -> Source {
        Source {
            consumer,
            heap: cfg.reorders.then(ReleaseQueue::new),
            sorted_runs: (cfg.reorders && cfg.sorted_runs).then(|| control.clone()),
            handled: 0,
            lead_ns: 0,
        }
    }

    /// Ends at once every record of a flushed group still waiting (in the
    /// line and the reorder heap), as `send_next` would at its release:
    /// counted as flushed and handed back to the port (`tx_discard`: host
    /// mode's NF_DROP verdict), so that a deleted pipe's packets are not held
    /// by a kernel until their release. Records in the line are marked and
    /// freed at their turn; those in the heap leave it now.
    pub(in crate::pipeline) fn end_flushed(&mut self, st: &mut OutputState, flush: &FlushSet) {
        let mut end = |frame: &[u8], kind: &Kind| {
            if !flush.contains(kind.group) {
                return false;
            }
            if let Some(w) = kind.whole {
                st.local_flushed += u64::from(w.wire_frames);
            } else if !kind.copy {
                st.local_flushed += 1;
                st.discard(frame);
            }
            true
        };
        self.consumer.discard_where(|h| end(h.frame, &Kind::of(h)));
        if let Some(heap) = self.heap.as_mut() {
            heap.retain(|h| h.kind.discarded || !end(&h.frame, &h.kind));
        }
    }

    /// The instant the next frame is to be handed over, if any frame is
    /// waiting: its release, less the send lead. Every frame waiting moves
    /// by the same lead, so the order is the releases' order.
    pub(in crate::pipeline) fn next_release(&mut self) -> Option<u64> {
        let led = self.led();
        self.next_release_unled().map(led)
    }

    /// A release as the instant its frame is handed over (less the lead).
    fn led(&self) -> impl Fn(u64) -> u64 {
        let lead_ns = self.lead_ns;
        move |release_ns| release_ns.saturating_sub(lead_ns)
    }

    pub(in crate::pipeline) fn set_lead_ns(&mut self, lead_ns: u64) {
        self.lead_ns = lead_ns;
    }

    fn next_release_unled(&mut self) -> Option<u64> {
        let Some(heap) = self.heap.as_mut() else {
            return self.consumer.peek().map(|h| h.release_ns);
        };
        if let Some(control) = &self.sorted_runs {
            // Acquire: the records counted are in the line when it is read.
            let count = control.out_of_order.load(Ordering::Acquire);
            if count == self.handled {
                let line = self.consumer.peek().map(|h| h.release_ns);
                return match (heap.peek_release_ns(), line) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            self.handled = count;
        }
        while let Some(h) = self.consumer.peek() {
            let held = Held {
                frame: h.frame.to_vec(),
                kind: Kind::of(&h),
            };
            heap.push(h.release_ns, held);
            self.consumer.pop();
        }
        heap.peek_release_ns()
    }

    /// Whether the next frame (the one [`Source::next_release`] found) is
    /// the heap's first rather than the line's.
    fn next_from_heap(&mut self) -> bool {
        let Some(heap) = self.heap.as_ref() else {
            return false;
        };
        // Without sorted runs, `next_release` moved the whole line into
        // the heap: the heap's first frame is the one it found.
        let line = self
            .sorted_runs
            .as_ref()
            .and_then(|_| self.consumer.peek().map(|h| h.release_ns));
        match (heap.peek_release_ns(), line) {
            (Some(a), Some(b)) => a <= b,
            (a, _) => a.is_some(),
        }
    }

    /// The wire frames the next record stands for (after
    /// [`Source::next_release`] found one): those of a super-frame stored
    /// whole, else 1.
    pub(in crate::pipeline) fn next_wire_frames(&mut self) -> usize {
        let whole = if self.next_from_heap() {
            self.heap
                .as_ref()
                .and_then(|h| h.peek())
                .and_then(|(_, h)| h.kind.whole)
        } else {
            self.consumer.peek().and_then(|h| h.whole)
        };
        whole.map_or(1, |w| w.wire_frames as usize)
    }

    /// Hands the next frame to `f` with the instant it is to be handed
    /// over (as [`Source::next_release`] gave it), and removes it.
    pub(in crate::pipeline) fn take<R>(&mut self, f: impl FnOnce(u64, &[u8], Kind) -> R) -> R {
        let led = self.led();
        if self.next_from_heap() {
            if let Some(heap) = self.heap.as_mut() {
                let (release_ns, h) = heap.pop().expect("next_release found one");
                return f(led(release_ns), &h.frame, h.kind);
            }
        }
        let h = self.consumer.peek().expect("next_release found one");
        // The frame is copied into the backend before the record is released.
        let r = f(led(h.release_ns), h.frame, Kind::of(&h));
        self.consumer.pop();
        r
    }
}

//! The stage's state between two batches: counts, held frames, groups of
//! pipes, and the changes it applies.

use super::*;

/// Counts of one direction, published under its control's lock.
pub(super) struct Counts {
    pub(super) received: u64,
    /// Bytes of the wire frames given to the model.
    pub(super) received_bytes: u64,
    pub(super) segmented: u64,
    pub(super) too_big: u64,
    pub(super) backpressure: u64,
    /// Stored in the delay line.
    pub(super) accepted: u64,
    /// Held by the model, not yet decided.
    pub(super) held: u64,
    /// The model's fates (delivered before backpressure).
    pub(super) fates: FateCounts,
    pub(super) kernel_drops: u64,
    /// The model's delays (release − arrival, ns) of the packets stored
    /// since the last publication, each with its number of wire frames:
    /// recorded into the shared histogram under the lock each publication
    /// takes anyway ([`Stage::publish`]). A list, not a local histogram:
    /// merging two histograms walks all their counters (microseconds), so
    /// it could not be done at every batch, and merging less often would
    /// need a wake-up of its own after the last packet (sparse traffic
    /// would pay one more per packet).
    pub(super) delays: Vec<(u64, u64)>,
}

impl Default for Counts {
    fn default() -> Self {
        Counts {
            received: 0,
            received_bytes: 0,
            segmented: 0,
            too_big: 0,
            backpressure: 0,
            accepted: 0,
            held: 0,
            fates: FateCounts::default(),
            kernel_drops: 0,
            // A batch's worth without allocating; kept (cleared) between batches.
            delays: Vec::with_capacity(256),
        }
    }
}

/// The live stage's own counts, one for all its pairs, published with each
/// pair's directions.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Wakes {
    /// Its poll returns (`rx_wakeups`).
    pub(super) wakeups: u64,
    /// Turns that took frames while it was awake for a port's beat
    /// (`rx_on_beat`: each a wake-up the frame did not cost).
    pub(super) on_beat: u64,
    /// Its yields that lost the core to a busy task (`rx_yields_lost`).
    pub(super) yields_lost: u64,
}

pub(super) struct Held {
    pub(super) side: usize,
    pub(super) arrival_ns: u64,
    pub(super) frame: Vec<u8>,
}

pub(super) struct Stage {
    pub(super) names: [String; 2],
    pub(super) controls: [Arc<Control>; 2],
    /// Latest release stored in each delay line (see `output::Source`).
    pub(super) max_stored_ns: [u64; 2],
    /// The earliest release stored since the last turn's end: whether what
    /// the stage took leaves soon enough to be answered while it lingers.
    pub(super) soonest_stored_ns: Option<u64>,
    pub(super) producers: [Producer; 2],
    pub(super) max_frame: [usize; 2],
    /// Per side, whether a received super-frame may cross whole (see the
    /// module doc): its egress sends super-frames with coalescing on, its
    /// port wants no frames back.
    pub(super) whole_ok: [bool; 2],
    /// The decisions of the wire frames of the super-frame being taken
    /// whole, in order (kept to reuse its allocation).
    pub(super) whole_decisions: Vec<Decision>,
    /// That super-frame cut, when its wire frames' bytes are needed (for
    /// the tap, or once their decisions differ): the frames back to back,
    /// and where each ends.
    pub(super) cut_buf: Vec<u8>,
    pub(super) cut_ends: Vec<usize>,
    pub(super) c: [Counts; 2],
    /// When the delays recorded in `c` were last merged into the shared
    /// histograms (a merge walks thousands of counters: not once per batch).
    pub(super) wakes: Wakes,
    /// Tags, the model's time, and the frames the model holds until their
    /// decision ([`Driver`]: the rules replay keeps too).
    pub(super) driver: Driver<Held>,
    pub(super) started_ns: u64,
    /// Whether the model reads [`PacketIn::key`](linkem_core::node::PacketIn::key) (else it is not parsed).
    pub(super) reads_headers: bool,
    pub(super) shed: [bool; 2],
    pub(super) pushed: [bool; 2],
    pub(super) warned_too_big: bool,
    pub(super) warned_uncut: bool,
    /// The delay-line group of each pipe's packets (see [`crate::pipeline::FlushSet`]):
    /// a pipe deleted by a change has its group flushed; one made again
    /// later gets a new group.
    pub(super) groups: HashMap<u32, u32>,
    pub(super) next_group: u32,
    /// When idle instances were last removed by time.
    pub(super) swept_ns: u64,
    /// Most flow memory charged since the heap was last trimmed.
    pub(super) flow_peak_bytes: usize,
    pub(super) tap: Option<Box<dyn Tap>>,
    /// Per side, whether its port takes back frames not sent
    /// ([`RxPort::wants_discards`]), and those frames until the batch ends.
    pub(super) wants_discards: [bool; 2],
    pub(super) discards: [Vec<Vec<u8>>; 2],
    /// Per side, the stamp of the first frame taken since the pair's turn
    /// last read it (how long the frames stored were held from it).
    pub(super) first_stamp_ns: [Option<u64>; 2],
    /// Per side, the stamp of the latest frame taken.
    pub(super) last_stamp_ns: [u64; 2],
    /// Per side, the flows and stamps of the frames taken since the pair's
    /// turn last read them that came [`cadence::SPARSE_NS`] or more after
    /// their port's previous frame, [`cadence::FLOWS`] at most: the beats
    /// of its arrivals ([`Beats`]).
    pub(super) sparse: [Vec<(u64, u64)>; 2],
}

impl Stage {
    /// A record of `side` released at `release_ns` is in its delay line: the
    /// output stage is to be woken, and a release before one already stored is
    /// counted out of order (the output stage then sorts what it takes).
    pub(super) fn note_stored(&mut self, side: usize, release_ns: u64) {
        self.pushed[side] = true;
        self.soonest_stored_ns = earliest(self.soonest_stored_ns, Some(release_ns));
        if release_ns >= self.max_stored_ns[side] {
            self.max_stored_ns[side] = release_ns;
        } else {
            // Release: the record is in the line before the output stage sees the count.
            self.controls[side]
                .out_of_order
                .fetch_add(1, Ordering::Release);
        }
    }

    pub(super) fn new(
        names: [String; 2],
        controls: [Arc<Control>; 2],
        producers: [Producer; 2],
        max_frame: [usize; 2],
        supers: [bool; 2],
        tap: Option<Box<dyn Tap>>,
        started_ns: u64,
    ) -> Stage {
        Stage {
            names,
            controls,
            max_stored_ns: [0; 2],
            soonest_stored_ns: None,
            producers,
            max_frame,
            whole_ok: supers,
            whole_decisions: Vec::new(),
            cut_buf: Vec::new(),
            cut_ends: Vec::new(),
            c: Default::default(),
            wakes: Wakes::default(),
            driver: Driver::new(started_ns),
            started_ns,
            reads_headers: true,
            wants_discards: [false; 2],
            discards: Default::default(),
            first_stamp_ns: [None; 2],
            last_stamp_ns: [0; 2],
            sparse: std::array::from_fn(|_| Vec::with_capacity(cadence::FLOWS)),
            shed: [false; 2],
            pushed: [false; 2],
            warned_too_big: false,
            warned_uncut: false,
            groups: HashMap::new(),
            next_group: 1,
            swept_ns: started_ns,
            flow_peak_bytes: 0,
            tap,
        }
    }

    /// The model's time now: the clock, never before an instant given to it.
    pub(super) fn tick(&mut self) -> u64 {
        self.driver.arrival_ns(clock::now_ns())
    }

    /// Every [`SWEEP_EVERY_NS`]: removes the model's idle instances, and gives
    /// freed heap back once [`TRIM_AFTER_BYTES`] of flow memory went.
    pub(super) fn sweep<M: LiveModel>(&mut self, model: &mut M, now_ns: u64) {
        self.flow_peak_bytes = self.flow_peak_bytes.max(model.flow_memory_bytes());
        if now_ns.saturating_sub(self.swept_ns) < SWEEP_EVERY_NS {
            return;
        }
        self.swept_ns = now_ns;
        model.expire_idle(now_ns);
        let now_bytes = model.flow_memory_bytes();
        if self.flow_peak_bytes.saturating_sub(now_bytes) >= TRIM_AFTER_BYTES {
            crate::mem::release_free_memory();
            self.flow_peak_bytes = now_bytes;
        }
    }

    /// Applies the queued change requests, each at one instant (see
    /// [`LiveBridge::submit`]).
    pub(super) fn take_changes<M: LiveModel>(
        &mut self,
        model: &mut M,
        objs: &mut Objects,
        queue: &Mutex<VecDeque<Request>>,
    ) {
        let requests: Vec<Request> = lock(queue).drain(..).collect();
        for (changes, reply) in requests {
            let now = self.tick();
            let at = self.driver.begin_changes(model, now);
            self.settle_pending(objs);
            let answer = match changes.iter().try_for_each(|c| model.check(c)) {
                Ok(()) => {
                    self.apply(model, objs, changes, at);
                    Ok(now)
                }
                Err(e) => Err(SubmitError::Refused(e)),
            };
            // The caller may have gone (its connection closed): nothing to tell.
            let _ = reply.try_send(answer);
        }
    }

    /// Applies checked changes at `at` (after the poll there): decisions
    /// they force are settled, deleted pipes' packets flushed.
    pub(super) fn apply<M: LiveModel>(
        &mut self,
        model: &mut M,
        objs: &mut Objects,
        changes: Vec<Change>,
        at: ChangeInstant,
    ) {
        if let Some(tap) = self.tap.as_mut() {
            tap.changes(at.at_ns(), &changes);
        }
        for change in changes {
            let kept = match &change {
                Change::Rules { set, .. } => Some((
                    set.pipes.keys().copied().collect::<Vec<u32>>(),
                    set.sched.queues.keys().copied().collect::<Vec<u32>>(),
                )),
                _ => None,
            };
            let before = model.pipe_numbers();
            // Packets of kept schedulers and between hops stay held; those the
            // change decides (a changed or deleted scheduler's, a reinjection
            // that cannot go on) are settled now, into their pipe's group.
            if let Err(e) = self.driver.apply(model, at, change) {
                // Checked before: a model whose check passes a change its
                // apply refuses is in error, which must not stop the bridge.
                debug_assert!(false, "a checked change was refused: {e}");
            }
            self.settle_pending(objs);
            // The packets a deleted pipe gave a release time and that have not
            // left yet are flushed, those just settled too.
            let after = model.pipe_numbers();
            for n in before.into_iter().filter(|n| !after.contains(n)) {
                if let Some(g) = self.groups.remove(&n) {
                    for c in &self.controls {
                        c.flush.add(g);
                        // Host mode: the kernel holds them until their
                        // verdicts, which a sleeping output thread gives
                        // only once awake (it may sleep until a release).
                        if c.held.is_bounded() {
                            c.waker.wake();
                        }
                    }
                }
            }
            if let Some((pipes, queues)) = kept {
                objs.retain(
                    |p| pipes.binary_search(&p).is_ok(),
                    |q| queues.binary_search(&q).is_ok(),
                );
            }
        }
    }

    pub(super) fn group_of(&mut self, pipe: Option<u32>) -> u32 {
        let Some(p) = pipe else { return 0 };
        if let Some(&g) = self.groups.get(&p) {
            return g;
        }
        // Past the largest group, packets are never flushed (counted as
        // delivered at their release time instead).
        if self.next_group >= crate::pipeline::BOUNDED_GROUP {
            return 0;
        }
        let mut g = self.next_group;
        self.next_group += 1;
        if self.controls.iter().any(|c| c.held.bounds(p)) {
            g |= crate::pipeline::BOUNDED_GROUP;
        }
        self.groups.insert(p, g);
        g
    }
}

//! Starting and stopping the live stage and its output stages, one pair or a
//! group of pairs, and handing it changes ([`LiveBridge::submit`]).

use super::*;

/// A request of changes waiting for the stage, and where its answer goes.
pub(super) type Request = (Vec<Change>, SyncSender<Result<u64, SubmitError>>);

pub(super) struct Shared<M> {
    pub(super) stop: AtomicBool,
    /// The model and the state that settles its decisions: held by the stage
    /// for each batch, and briefly by readers ([`LiveBridge::with_model`]).
    pub(super) core: Mutex<Core<M>>,
    /// Per pipe and queue counts ([`crate::pipeline::objects`]); locked after `core`.
    pub(super) objects: Mutex<Objects>,
    /// Readers waiting for the core's lock: the stage yields after its
    /// batch, so that a busy stage does not keep taking the lock back at once.
    pub(super) wanted: AtomicUsize,
    /// Change requests for the stage, oldest first.
    pub(super) changes: Mutex<VecDeque<Request>>,
    pub(super) has_changes: AtomicBool,
    /// Written to wake the stage from its poll when a change is queued.
    pub(super) wake: Option<Arc<OwnedFd>>,
    /// Why a send port cannot send a packet twice, if one cannot: changes
    /// that duplicate are then refused before they reach the model.
    pub(super) no_copies: Option<&'static str>,
}

pub(super) struct Core<M> {
    pub(super) model: M,
    pub(super) stage: Stage,
}

/// A running bridge of two directions through one model.
pub struct LiveBridge<M: LiveModel> {
    pub(super) directions: Vec<Direction>,
    pub(super) shared: Arc<Shared<M>>,
    /// The threads of a bridge started alone ([`LiveBridge::start`]); a
    /// group's pairs leave theirs to the [`LiveGroup`].
    pub(super) threads: Option<LiveGroup>,
}

/// The bridge of `linkem bridge --rules`.
pub type NodeBridge = LiveBridge<Node>;

impl<M: LiveModel> LiveBridge<M> {
    /// Starts the live stage and the two output stages. `rx[0]`/`tx[0]`:
    /// IF_A's receive half and IF_B's send half (direction a->b, side A).
    /// It starts as a group of one pair does ([`LiveBridge::start_group`]),
    /// laid out for one pair (`Layout::Alone`), its threads owned by the bridge.
    pub fn start(
        opts: LiveOptions,
        model: M,
        rx: [Box<dyn RxPort>; 2],
        tx: [Box<dyn TxPort>; 2],
    ) -> Result<LiveBridge<M>, String> {
        let pair = GroupPair {
            names: opts.names.clone(),
            buffer_bytes: opts.buffer_bytes,
            model,
            rx,
            tx,
        };
        let (mut bridges, threads) =
            Self::launch(opts, vec![pair], Vec::new(), None, Layout::Alone)?;
        let mut bridge = bridges.pop().ok_or("no pair started")?;
        bridge.threads = Some(threads);
        Ok(bridge)
    }

    /// The two directions (a->b, b->a), for their counts and errors.
    pub fn directions(&self) -> &[Direction] {
        &self.directions
    }

    /// Counts of the two directions (a->b, b->a), as [`Direction::stats`]
    /// gives them, the model's own drops among each one's fates.
    pub fn stats(&self) -> Vec<DirectionStats> {
        self.directions.iter().map(Direction::stats).collect()
    }

    /// An I/O error that stopped a stage, if any.
    pub fn error(&self) -> Option<String> {
        self.directions.iter().find_map(Direction::error)
    }

    /// Looks at the model (its pipes, rules and counters) under its lock: the
    /// stage waits meanwhile, so keep `f` short while traffic flows.
    pub fn with_model<R>(&self, f: impl FnOnce(&M) -> R) -> R {
        self.shared.wanted.fetch_add(1, Ordering::Relaxed);
        let guard = lock(&self.shared.core);
        self.shared.wanted.fetch_sub(1, Ordering::Relaxed);
        f(&guard.model)
    }

    /// Each pipe's and queue's counts by fate, packets in it now and time
    /// spent in it (see `ObjectStats`), by number.
    pub fn object_stats(&self) -> ObjectsSnapshot {
        lock(&self.shared.objects).snapshot(clock::now_ns())
    }

    /// Applies `changes` on the stage's thread, between two batches, at one
    /// instant `t` (the stage's clock, CLOCK_REALTIME ns, never before an
    /// instant the model was given): the model runs what is due by `t`, then
    /// takes every change in order, or none if one does not fit it. Returns
    /// `t` once applied. Packets already decided keep their release times; a
    /// deleted pipe's packets not yet sent are flushed. Requests apply in the
    /// order they are made.
    pub fn submit(&self, changes: Vec<Change>) -> Result<u64, SubmitError> {
        self.submit_later(changes)?.wait()
    }

    /// What [`LiveBridge::submit`] refuses before the stage sees the
    /// changes: a stopped bridge, copies its ports cannot send. A caller
    /// that hands several bridges changes as one asks each first.
    pub fn check_submit(&self, changes: &[Change]) -> Result<(), SubmitError> {
        if self.shared.stop.load(Ordering::Acquire) {
            return Err(SubmitError::Stopped);
        }
        match self.shared.no_copies {
            Some(why) if changes.iter().any(Change::duplicates) => Err(SubmitError::NoCopies(why)),
            _ => Ok(()),
        }
    }

    /// [`LiveBridge::submit`] without waiting for the stage: the changes are
    /// queued and the stage woken; [`Submitted::wait`] gives the instant. A
    /// group's pairs' changes queued one after the other this way apply in
    /// the same pass of the stage over its pairs.
    pub fn submit_later(&self, changes: Vec<Change>) -> Result<Submitted, SubmitError> {
        self.check_submit(&changes)?;
        let (reply, answer) = sync_channel(1);
        {
            let mut q = lock(&self.shared.changes);
            if q.len() >= MAX_PENDING_CHANGES {
                return Err(SubmitError::Busy);
            }
            q.push_back((changes, reply));
            self.shared.has_changes.store(true, Ordering::Release);
        }
        if let Some(fd) = &self.shared.wake {
            kick(fd);
        }
        if let Some(t) = self.threads.as_ref().and_then(|g| g.stage.as_ref()) {
            // Ports without sockets wait in turns; a parked stage wakes.
            t.thread().unpark();
        }
        Ok(Submitted(answer))
    }

    /// Stops the live stage, then the output stages (packets still in the
    /// delay lines are not sent); returns the final counts. The model stays
    /// readable with [`LiveBridge::with_model`].
    pub fn stop(&mut self) -> Vec<DirectionStats> {
        self.halt();
        self.directions.drain(..).map(Direction::stop).collect()
    }

    /// The clock instant the model started at: the origin of its links'
    /// schedules and traces ([`linkem_core::Link::start_at`]).
    pub fn started_ns(&self) -> u64 {
        lock(&self.shared.core).stage.started_ns
    }

    /// The tap given at start, once the stage has stopped (to finish it).
    pub fn take_tap(&mut self) -> Option<Box<dyn Tap>> {
        self.halt();
        lock(&self.shared.core).stage.tap.take()
    }

    pub(super) fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Stops the stage; a bridge alone has its output threads in its
        // directions, stopped after it (`Direction::stop`).
        if let Some(mut threads) = self.threads.take() {
            threads.stop();
        }
    }
}

/// One interface pair of a bridge of several ([`LiveBridge::start_group`]):
/// its model, its delay lines' sizes, its ports as [`LiveBridge::start`]
/// takes them (`rx[0]`/`tx[0]`: IF_A's receive half and IF_B's send half).
pub struct GroupPair<M> {
    /// The names of its two directions, for messages and stats.
    pub names: [String; 2],
    /// Each direction's delay-line size, bytes.
    pub buffer_bytes: [usize; 2],
    /// The pair's own model (its own seed: see `linkem_core::rng::pair_seed`).
    pub model: M,
    /// IF_A's and IF_B's receive halves.
    pub rx: [Box<dyn RxPort>; 2],
    /// IF_B's and IF_A's send halves.
    pub tx: [Box<dyn TxPort>; 2],
}

/// The threads of a bridge of several pairs: one live stage for every pair,
/// one output stage for every pair's a->b direction and one for every b->a
/// ([`crate::pipeline::output_group`]): three threads whatever the number of pairs.
/// [`LiveGroup::stop`] ends them; stop it before the pairs' [`LiveBridge`]s.
/// A bridge started alone holds its own, the live stage only: its output
/// threads are its directions' (one each, stopped with them).
pub struct LiveGroup {
    pub(super) stop: Arc<AtomicBool>,
    /// Wakes the live stage from its poll for the stop.
    pub(super) wake: Option<Arc<OwnedFd>>,
    pub(super) output_stop: Arc<AtomicBool>,
    pub(super) stage: Option<JoinHandle<()>>,
    pub(super) outputs: Vec<JoinHandle<()>>,
    /// How the group's output threads are woken (one each).
    pub(super) output_wakers: Vec<Arc<Waker>>,
}

impl LiveGroup {
    /// Stops the live stage, then the output stages (packets still in the
    /// delay lines are not sent); the pairs' counts are final afterwards.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.stage.take() {
            if let Some(fd) = &self.wake {
                kick(fd);
            }
            t.thread().unpark();
            let _ = t.join();
        }
        self.output_stop.store(true, Ordering::Release);
        for w in &self.output_wakers {
            w.wake();
        }
        for t in self.outputs.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for LiveGroup {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How a start lays out a group's threads and delay lines: the one thing
/// that differs between a bridge of its own and a group of pairs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    /// One pair ([`LiveBridge::start`]): each direction has an output
    /// thread of its own, named after it; its delay lines are resident at
    /// once (the link is what the bridge is for: no page faults on its
    /// first frames); the stage takes `opts.tap` and polls the pair's
    /// wake-up eventfd for its stop too.
    Alone,
    /// Several pairs ([`LiveBridge::start_group`]): two output threads for
    /// every pair's directions; each line resident as its traffic comes
    /// (most links of a lab are idle most of the time); a tap per pair,
    /// if any.
    Group,
}

/// One pair's directions, set up before the stage starts.
struct Built<M> {
    names: [String; 2],
    directions: Vec<Direction>,
    producers: Vec<Producer>,
    outlets: Vec<Arc<Outlet>>,
    max_frame: [usize; 2],
    supers: [bool; 2],
    /// The interface each direction sends out of, for its kernel path.
    egress: [Option<u32>; 2],
    model: M,
    rx: [Box<dyn RxPort>; 2],
    no_copies: Option<&'static str>,
}

impl<M: LiveModel> LiveBridge<M> {
    /// Starts the stages of several pairs, each with its own model: one live
    /// stage thread takes every pair's frames (a batch of each pair in turn,
    /// one poll over all their sockets when idle), and two output stage
    /// threads send them (see [`LiveGroup`]). Returns one [`LiveBridge`] per
    /// pair, in order, for its counts and changes (`submit`, `with_model`,
    /// `stats` as for a bridge of its own), and the threads. `opts` gives the
    /// timing for all; its names, buffer sizes and tap are not used (each
    /// pair has its own; a group takes no tap).
    pub fn start_group(
        opts: LiveOptions,
        pairs: Vec<GroupPair<M>>,
    ) -> Result<(Vec<LiveBridge<M>>, LiveGroup), String> {
        Self::launch(opts, pairs, Vec::new(), None, Layout::Group)
    }

    /// [`LiveBridge::start_group`] with a tap per pair (`taps[i]` sees pair
    /// i's frames, decisions and changes; missing entries: none), every
    /// pair's model started at `started_ns` (a clock instant, not in the
    /// future): groups started at one instant count their schedules and
    /// traces from it alike, and their recordings keep it.
    pub fn start_group_with(
        opts: LiveOptions,
        pairs: Vec<GroupPair<M>>,
        taps: Vec<Option<Box<dyn Tap>>>,
        started_ns: u64,
    ) -> Result<(Vec<LiveBridge<M>>, LiveGroup), String> {
        Self::launch(opts, pairs, taps, Some(started_ns), Layout::Group)
    }

    /// The one start of the live stage, for one pair or several (`layout`);
    /// every pair's model starts at `started_ns`, else once the delay lines
    /// are built.
    pub(super) fn launch(
        mut opts: LiveOptions,
        pairs: Vec<GroupPair<M>>,
        taps: Vec<Option<Box<dyn Tap>>>,
        started_ns: Option<u64>,
        layout: Layout,
    ) -> Result<(Vec<LiveBridge<M>>, LiveGroup), String> {
        let stop = Arc::new(AtomicBool::new(false));
        let output_stop = Arc::new(AtomicBool::new(false));
        let wake = wake_fd().map(Arc::new);
        let mut group = LiveGroup {
            stop: stop.clone(),
            wake: wake.clone(),
            output_stop: output_stop.clone(),
            stage: None,
            outputs: Vec::new(),
            output_wakers: Vec::new(),
        };
        if layout == Layout::Group {
            group.output_wakers = vec![Arc::new(Waker::new()?), Arc::new(Waker::new()?)];
        }
        let cfg = output_config(&opts);
        let mut sides: [Vec<Arc<Outlet>>; 2] = Default::default();
        let mut built = Vec::new();
        for pair in pairs {
            built.push(build_pair(
                pair,
                &opts,
                cfg,
                layout,
                &mut sides,
                &group.output_wakers,
            )?);
        }
        if layout == Layout::Group {
            group.outputs = spawn_group_outputs(sides, &opts, cfg, &output_stop)?;
        }
        let mut taps = taps.into_iter();
        let started_ns = started_ns.unwrap_or_else(clock::now_ns);
        let mut bridges = Vec::new();
        let mut loops = Vec::new();
        for b in built {
            let tap = match layout {
                Layout::Alone => opts.tap.take(),
                Layout::Group => taps.next().flatten(),
            };
            let controls = [
                b.directions[0].control.clone(),
                b.directions[1].control.clone(),
            ];
            let producers: [Producer; 2] =
                (b.producers.try_into()).map_err(|_| "two delay lines".to_string())?;
            let outlets: [Arc<Outlet>; 2] =
                (b.outlets.try_into()).map_err(|_| "two outlets".to_string())?;
            let out = Outputs::new(outlets);
            let stage = Stage::new(
                b.names,
                controls.clone(),
                producers,
                b.max_frame,
                b.supers,
                tap,
                started_ns,
            );
            // A pair alone is woken for its changes and its stop by one fd.
            let pair_wake = match layout {
                Layout::Alone => wake.clone(),
                Layout::Group => wake_fd().map(Arc::new),
            };
            let shared = Shared::started(b.model, stage, b.no_copies, pair_wake);
            loops.push(PairLoop::new(shared.clone(), controls, b.rx, out, b.egress));
            bridges.push(LiveBridge {
                directions: b.directions,
                shared,
                threads: None,
            });
        }
        group.stage = Some(spawn_stage(loops, opts, stop, wake)?);
        Ok((bridges, group))
    }
}

/// Sets up one pair's delay lines, controls and outlets; with
/// [`Layout::Alone`] starts each direction's output thread, else leaves its
/// outlets to the group's (`sides`).
fn build_pair<M: LiveModel>(
    pair: GroupPair<M>,
    opts: &LiveOptions,
    cfg: OutputConfig,
    layout: Layout,
    sides: &mut [Vec<Arc<Outlet>>; 2],
    side_wakers: &[Arc<Waker>],
) -> Result<Built<M>, String> {
    let mut directions = Vec::new();
    let mut producers = Vec::new();
    let mut outlets = Vec::new();
    let mut max_frame = [0usize; 2];
    let mut supers = [false; 2];
    let mut egress = [None; 2];
    let no_copies = pair.tx.iter().find_map(|t| t.no_copies());
    for (i, tx) in pair.tx.into_iter().enumerate() {
        let (producer, consumer) = match layout {
            Layout::Alone => delay_line(pair.buffer_bytes[i])?,
            Layout::Group => delay_line_with(pair.buffer_bytes[i], LAZY_FIRST_RESIDENT_BYTES)?,
        };
        // A pair alone has an output thread per direction; a group's
        // directions of one side share theirs.
        let waker = match side_wakers.get(i) {
            Some(w) => w.clone(),
            None => Arc::new(Waker::new()?),
        };
        let mut control =
            Control::new(producer.uses_huge_pages(), producer.capacity_bytes(), waker);
        control.held = crate::pipeline::HeldPerGroup::new(tx.max_held_per_pipe());
        let control = Arc::new(control);
        max_frame[i] = tx.max_frame_bytes();
        egress[i] = tx.egress_ifindex();
        supers[i] = opts.coalesce_window_ns.is_some() && tx.sends_super_frames();
        let outlet = Outlet::new(control.clone(), consumer, tx, &cfg);
        let threads = match layout {
            Layout::Alone => vec![spawn_output(outlet.clone(), &pair.names[i], opts, cfg)?],
            Layout::Group => {
                sides[i].push(outlet.clone());
                Vec::new()
            }
        };
        outlets.push(outlet);
        producers.push(producer);
        directions.push(Direction {
            name: pair.names[i].clone(),
            control,
            threads,
        });
    }
    Ok(Built {
        names: pair.names,
        directions,
        producers,
        outlets,
        max_frame,
        supers,
        egress,
        model: pair.model,
        rx: pair.rx,
        no_copies,
    })
}

/// The live stage's thread over `loops` until `stop`; `wake` wakes its poll
/// for the stop.
fn spawn_stage<M: LiveModel>(
    mut loops: Vec<PairLoop<M>>,
    opts: LiveOptions,
    stop: Arc<AtomicBool>,
    wake: Option<Arc<OwnedFd>>,
) -> Result<JoinHandle<()>, String> {
    std::thread::Builder::new()
        .name("linkem-stage".into())
        .spawn(move || {
            let realtime = stage_realtime(&opts, |e| {
                for l in &loops {
                    l.fail(e.clone());
                }
            });
            let stop_fd = wake.as_ref().map(|fd| fd.as_raw_fd());
            live_stage(&mut loops, &stop, stop_fd, &opts, realtime);
            for l in &loops {
                l.shared.stop.store(true, Ordering::Release);
                // Requests that came too late are answered, not left waiting.
                for (_, reply) in lock(&l.shared.changes).drain(..) {
                    let _ = reply.try_send(Err(SubmitError::Stopped));
                }
            }
            // The receive sockets close all at once (see `close_all`).
            crate::port::close_all(loops.into_iter().map(|l| l.rx).collect());
        })
        .map_err(|e| format!("cannot start the stage thread: {e}"))
}

/// The output thread of one direction of a pair alone, named after it.
fn spawn_output(
    outlet: Arc<Outlet>,
    name: &str,
    opts: &LiveOptions,
    cfg: OutputConfig,
) -> Result<JoinHandle<()>, String> {
    let prio = opts.realtime_priority;
    let timed_only = opts.realtime_timed_only;
    let control = outlet.control().clone();
    std::thread::Builder::new()
        .name(format!("linkem-out-{name}"))
        .spawn(move || {
            let mut realtime = prio.map(|p| wait::Realtime::new(p, timed_only));
            if let Some(Err(e)) = realtime.as_mut().map(wait::Realtime::wait_mode) {
                control.fail(format!("output stage: {e}"));
            }
            output_stage(outlet, cfg, realtime)
        })
        .map_err(|e| format!("cannot start the output thread: {e}"))
}

/// The group's two output threads, one a direction, each sending for every
/// pair's outlet of its direction (`outlets[i]`).
fn spawn_group_outputs(
    outlets: [Vec<Arc<Outlet>>; 2],
    opts: &LiveOptions,
    cfg: OutputConfig,
    output_stop: &Arc<AtomicBool>,
) -> Result<Vec<JoinHandle<()>>, String> {
    let mut threads = Vec::new();
    for (i, dirs) in outlets.into_iter().enumerate() {
        let prio = opts.realtime_priority;
        let timed_only = opts.realtime_timed_only;
        let out_stop = output_stop.clone();
        let fail_to = dirs.iter().map(|d| d.control().clone()).collect::<Vec<_>>();
        let thread = std::thread::Builder::new()
            .name(format!("linkem-out-{}", ["a->b", "b->a"][i]))
            .spawn(move || {
                let mut realtime = prio.map(|p| wait::Realtime::new(p, timed_only));
                if let Some(Err(e)) = realtime.as_mut().map(wait::Realtime::wait_mode) {
                    for c in &fail_to {
                        c.fail(format!("output stage: {e}"));
                    }
                }
                output_group(out_stop, dirs, cfg, realtime)
            })
            .map_err(|e| format!("cannot start the output thread: {e}"))?;
        threads.push(thread);
    }
    Ok(threads)
}

/// Wakes the stage polling on the eventfd `fd`.
pub(super) fn kick(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // Safety: writes 8 bytes from a live buffer to an owned eventfd; a full
    // counter (EAGAIN) means the stage is woken already.
    let _ = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
}

/// The eventfd that wakes the live stage from its poll when a change is
/// queued or a stop asked; without one the stage looks at both every
/// [`IDLE_WAIT_NS`], and nothing is lost.
pub(super) fn wake_fd() -> Option<OwnedFd> {
    // Safety: eventfd takes no pointers; a valid descriptor is owned below.
    let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    // Safety: `efd` was just opened and is owned by nothing else.
    (efd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(efd) })
}

impl<M: LiveModel> Shared<M> {
    /// A pair's state shared by its stage and its handle. The link starts when
    /// the stage does: no stamp is earlier, and a recording stores the instant
    /// (through the tap) so that its replay starts there too.
    pub(super) fn started(
        mut model: M,
        mut stage: Stage,
        no_copies: Option<&'static str>,
        wake: Option<Arc<OwnedFd>>,
    ) -> Arc<Self> {
        model.start(stage.started_ns);
        if let Some(tap) = stage.tap.as_mut() {
            tap.start(stage.started_ns);
        }
        Arc::new(Shared {
            stop: AtomicBool::new(false),
            core: Mutex::new(Core { model, stage }),
            objects: Mutex::new(Objects::default()),
            wanted: AtomicUsize::new(0),
            changes: Mutex::new(VecDeque::new()),
            has_changes: AtomicBool::new(false),
            // Without it a change waits for the stage's next turn (at most
            // IDLE_WAIT_NS); nothing is lost.
            wake,
            no_copies,
        })
    }
}

/// The stage thread's real-time policy: real-time throughout
/// (`realtime_input`), or only while it waits for an instant; `fail` hears
/// why real-time could not be had.
pub(super) fn stage_realtime(opts: &LiveOptions, fail: impl Fn(String)) -> Option<Realtime> {
    match (opts.realtime_priority, opts.realtime_input) {
        (Some(p), true) => {
            if let Err(e) = set_realtime(p) {
                fail(format!("live stage: {e}"));
            }
            None
        }
        (Some(p), false) => Some(Realtime::new(p, opts.realtime_timed_only)),
        (None, _) => None,
    }
}

impl<M: LiveModel> Drop for LiveBridge<M> {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The output stages' settings, for one pair and for several alike.
pub(super) fn output_config(opts: &LiveOptions) -> OutputConfig {
    OutputConfig {
        spin_ns: opts.spin_ns,
        spin_always: opts.spin_always,
        spin_budget_ppm: opts.spin_budget_ppm,
        max_lag_ns: opts.max_lag_ns,
        // Packets of different pipes (or reordered by the link) leave out of
        // arrival order; the stage counts the records it stores out of
        // order, so in-order runs are sent uncopied.
        reorders: true,
        sorted_runs: true,
        coalesce_window_ns: opts.coalesce_window_ns,
    }
}

/// Changes handed to the stage ([`LiveBridge::submit_later`]), not yet answered.
pub struct Submitted(Receiver<Result<u64, SubmitError>>);

impl Submitted {
    /// The instant the changes applied from, once the stage has taken them.
    pub fn wait(self) -> Result<u64, SubmitError> {
        wait_reply(&self.0)
    }
}

/// Spins a little for the stage's answer, then sleeps on it.
pub(super) fn wait_reply(answer: &Receiver<Result<u64, SubmitError>>) -> Result<u64, SubmitError> {
    let start = clock::now_ns();
    loop {
        match answer.try_recv() {
            Ok(r) => return r,
            Err(TryRecvError::Disconnected) => return Err(SubmitError::Stopped),
            Err(TryRecvError::Empty) => {}
        }
        if clock::now_ns().saturating_sub(start) > REPLY_SPIN_NS {
            return answer.recv().unwrap_or(Err(SubmitError::Stopped));
        }
        std::hint::spin_loop();
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

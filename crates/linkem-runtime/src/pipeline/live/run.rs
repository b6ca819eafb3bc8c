//! The stage's loop over its pairs: one turn per pair, and the poll it sleeps
//! in between.

use super::*;

/// One pair's part of the live stage: its model and stage (in `shared`), its
/// directions' controls, its two receive ports and its output side.
pub(super) struct PairLoop<M> {
    pub(super) shared: Arc<Shared<M>>,
    pub(super) controls: [Arc<Control>; 2],
    pub(super) rx: [Box<dyn RxPort>; 2],
    pub(super) out: Outputs,
    pub(super) drops_read_ns: u64,
    /// The pair's link stopped ([`PairLoop::stop_pair`]): its ports are not
    /// read nor polled any more; the stage goes on with the other pairs.
    pub(super) stopped: bool,
    /// Each receive port's interface was last seen down ([`PortHealth::Down`]):
    /// asked again every [`PortHealth::DOWN_CHECK_NS`] until it is up or gone.
    pub(super) down: [bool; 2],
    /// Each direction's kernel path (the `kernel` module).
    pub(super) kernel: [KernelSide; 2],
    /// The beats of each receive port's flows.
    pub(super) cadence: [Beats; 2],
    /// How long the latest frames stored were held from their stamps.
    pub(super) held_ns: Option<u64>,
}

/// What one pair's turn found.
pub(super) struct Turn {
    pub(super) taken: usize,
    /// The earliest receive stamp of the frames taken.
    pub(super) first_stamp: Option<u64>,
    /// The earliest release among the frames this turn stored or sent.
    pub(super) leaving: Option<u64>,
    pub(super) full: bool,
    pub(super) next: Option<u64>,
    /// When the model next sweeps its idle flow instances, if it holds any.
    pub(super) sweep_at: Option<u64>,
    /// The earliest window, not yet over, in which a port's beat says its
    /// next frame comes ([`Beats::window`]).
    pub(super) expected: Option<(u64, u64)>,
    /// How long the latest frames of the pair whose window that is were
    /// held from their stamps.
    pub(super) held_ns: Option<u64>,
    pub(super) now: u64,
}

impl<M: LiveModel> PairLoop<M> {
    pub(super) fn new(
        shared: Arc<Shared<M>>,
        controls: [Arc<Control>; 2],
        mut rx: [Box<dyn RxPort>; 2],
        out: Outputs,
        egress: [Option<u32>; 2],
    ) -> Self {
        let mut kernel = [KernelSide::default(); 2];
        for side in 0..2 {
            if let Some(path) = rx[side].kernel_path() {
                let _ = controls[side].kernel.set(path.counter());
                kernel[side].egress = egress[side];
            }
        }
        let want_kernel = {
            let mut guard = lock(&shared.core);
            let Core { model, stage } = &mut *guard;
            stage.reads_headers = model.reads_headers();
            stage.wants_discards = rx.each_ref().map(|p| p.wants_discards());
            for side in 0..2 {
                stage.whole_ok[side] &= !stage.wants_discards[side];
            }
            // Down interfaces are heard of in the turns.
            kernel::wanted(model, stage, [false; 2])
        };
        // A pass-through from the start is switched on before the pair says
        // it is ready: attaching the tc program takes milliseconds (the
        // kernel's RTNL lock), and the first frames would meet linkem.
        for side in 0..2 {
            let outlet = &out.outlets[side];
            kernel::switch_on(
                &mut kernel[side],
                &mut *rx[side],
                outlet,
                want_kernel[side],
                0,
                0,
            );
        }
        PairLoop {
            shared,
            controls,
            rx,
            out,
            drops_read_ns: 0,
            stopped: false,
            down: [false; 2],
            kernel,
            cadence: Default::default(),
            held_ns: None,
        }
    }

    pub(super) fn fail(&self, e: String) {
        for c in &self.controls {
            c.fail(e.clone());
        }
    }

    /// Asks each receive port of the pair for its interface's state (after a
    /// socket error, or while it is down), and stops the pair if one is gone.
    pub(super) fn check_health(&mut self, sides: [bool; 2], wakes: Wakes) {
        for (side, asked) in sides.into_iter().enumerate() {
            if !asked || self.stopped {
                continue;
            }
            match self.rx[side].health() {
                PortHealth::Running => self.down[side] = false,
                PortHealth::Down => self.down[side] = true,
                PortHealth::Gone(why) => self.stop_pair(format!("{why}: the link stopped"), wakes),
            }
        }
    }

    /// Stops this pair's link for `why` (an interface gone, an I/O error):
    /// the error is recorded for the bridge to report, the last counts
    /// published and the delay lines closed (the output stages send or drop
    /// what they hold, then leave them), change requests answered; the
    /// stage goes on with its other pairs, if any.
    pub(super) fn stop_pair(&mut self, why: String, wakes: Wakes) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        self.fail(why);
        self.finish(wakes);
        self.shared.stop.store(true, Ordering::Release);
        for (_, reply) in lock(&self.shared.changes).drain(..) {
            let _ = reply.try_send(Err(SubmitError::Stopped));
        }
    }

    /// One batch of the pair: changes, both ports' frames, the model's
    /// events due, counts published.
    // Kept whole: the stage's hot loop, whose steps share the core's lock guard and the batch's `now`.
    pub(super) fn turn(&mut self, opts: &LiveOptions, wakes: Wakes) -> Result<Turn, String> {
        let PairLoop {
            shared,
            controls,
            rx,
            out,
            drops_read_ns,
            stopped: _,
            down,
            kernel,
            cadence,
            held_ns,
        } = self;
        // An output stage of this pair failed: the pair stops as a whole.
        if let Some(c) = controls.iter().find(|c| c.has_failed()) {
            return Err(c
                .error_text()
                .unwrap_or_else(|| "output stage failed".into()));
        }
        let batch = opts.batch.max(1);
        let now = clock::now_ns();
        // While an output stage is more than max-lag behind, its direction
        // stores nothing (counted backpressure).
        let shed = controls.each_ref().map(|c| {
            let behind_ns = now.saturating_sub(c.output_at_ns.load(Ordering::Relaxed));
            opts.max_lag_ns.is_some_and(|m| behind_ns > m)
        });
        let mut guard = lock(&shared.core);
        let Core { model, stage } = &mut *guard;
        let mut objs = lock(&shared.objects);
        if shared.has_changes.swap(false, Ordering::AcqRel) {
            stage.take_changes(model, &mut objs, &shared.changes);
        }
        // A link that now does something takes its frames from here on.
        let want_kernel = kernel::wanted(model, stage, *down);
        for side in 0..2 {
            kernel::switch_off(&mut kernel[side], &mut *rx[side], want_kernel[side])?;
        }
        stage.shed = shed;
        let mut taken = 0;
        let mut taken_side = [0usize; 2];
        let mut full = false;
        for (side, port) in rx.iter_mut().enumerate() {
            let n = port
                .rx_batch(batch, &mut |frame| {
                    stage.take(model, &mut objs, side, frame)
                })
                .map_err(|e| format!("receive: {e}"))?;
            taken += n;
            taken_side[side] = n;
            full |= n == batch;
        }
        for (beats, sparse) in cadence.iter_mut().zip(&mut stage.sparse) {
            for (flow, t) in sparse.drain(..) {
                beats.arrived(flow, t);
            }
        }
        let [a, b] = &mut stage.first_stamp_ns;
        let first_stamp = earliest(a.take(), b.take());
        let now = stage.tick();
        stage.poll(model, &mut objs, now);
        stage.sweep(model, now);
        for (side, port) in rx.iter_mut().enumerate() {
            for frame in stage.discards[side].drain(..) {
                port.discard(&frame);
            }
        }
        let next = model.next_event_ns();
        let sweep_at =
            (model.flow_memory_bytes() > 0).then(|| stage.swept_ns.saturating_add(SWEEP_EVERY_NS));
        if now.wrapping_sub(*drops_read_ns) > KERNEL_DROPS_EVERY_NS {
            *drops_read_ns = now;
            for (i, port) in rx.iter_mut().enumerate() {
                stage.c[i].kernel_drops = port.rx_kernel_drops();
            }
        }
        stage.wakes = wakes;
        let pushed = stage.publish_all();
        let soonest_stored = stage.soonest_stored_ns.take();
        if let (Some(release_ns), Some(stamp_ns)) = (soonest_stored, first_stamp) {
            *held_ns = Some(release_ns.saturating_sub(stamp_ns));
        }
        let accepted = [stage.c[0].accepted, stage.c[1].accepted];
        drop(objs);
        drop(guard);
        let sent = out.hand_out(pushed)?;
        let mut kernel_retry = None;
        for side in 0..2 {
            let again = kernel::switch_on(
                &mut kernel[side],
                &mut *rx[side],
                &out.outlets[side],
                want_kernel[side],
                taken_side[side],
                accepted[side],
            );
            if again {
                kernel_retry = Some(now + KERNEL_RETRY_NS);
            }
        }
        // What the stage sent itself left now.
        let leaving = earliest(soonest_stored, (sent > 0).then_some(now));
        let next = earliest(next, out.next_claimed_ns());
        if shared.wanted.load(Ordering::Relaxed) > 0 {
            std::thread::yield_now();
        }
        Ok(Turn {
            taken,
            first_stamp,
            leaving,
            full,
            next,
            // A kernel path waiting to switch on is looked at again as a
            // sweep is: the stage's sleep ends then, nothing spins for it.
            sweep_at: earliest(sweep_at, kernel_retry),
            expected: expected_window(cadence, now),
            held_ns: *held_ns,
            now,
        })
    }

    /// The last counts, and the delay lines closed (the output stages end
    /// once they are empty).
    pub(super) fn finish(&mut self, wakes: Wakes) {
        let mut guard = lock(&self.shared.core);
        let stage = &mut guard.stage;
        for (i, port) in self.rx.iter_mut().enumerate() {
            stage.c[i].kernel_drops = port.rx_kernel_drops();
        }
        stage.wakes = wakes;
        stage.publish_all();
        for p in &stage.producers {
            p.close();
        }
        // A parked output thread learns that its line closed.
        for o in &self.out.outlets {
            o.control().waker.wake();
        }
    }
}

/// The live stage's loop over its pairs (one for `linkem bridge IF_A IF_B`,
/// several for `--pair`) until `stop`: each turn takes a batch of every pair;
/// with nothing taken it sleeps in one poll over every pair's ports and
/// wake-up eventfd, until the earliest of the pairs' next model events.
pub(super) fn live_stage<M: LiveModel>(
    pairs: &mut [PairLoop<M>],
    stop: &AtomicBool,
    stop_fd: Option<RawFd>,
    opts: &LiveOptions,
    mut realtime: Option<Realtime>,
) {
    // Poll timeouts are the model's event times: no slack on top of them.
    clock::set_timer_slack_ns(1);
    let mut fds: Vec<RawFd> = Vec::new();
    let (wake_fds, woken_by_fds) = wake_fds_of(pairs, stop_fd);
    let mut wakes = Wakes::default();
    let mut wake = WakeEstimate::default();
    let mut beat_wake = WakeEstimate::default();
    let mut budget = SpinBudget::new(clock::now_ns());
    let mut linger = Linger::new(opts.linger_ns, opts.spin_budget_ppm, STAGE_HORIZON_NS)
        .holds_keep_core(realtime.is_some());
    let mut owners: Vec<(usize, usize)> = Vec::new();
    let mut error_wakes = 0u32;
    let mut down_checked_ns = 0u64;
    'run: while !stop.load(Ordering::Acquire) {
        wakes.yields_lost = linger.yields_lost();
        let Some(turn) = turn_all(pairs, opts, wakes) else {
            break 'run;
        };
        if turn.taken > 0 {
            error_wakes = 0;
        }
        if turn.full {
            if let Some(rt) = realtime.as_mut() {
                rt.busy(turn.now);
            }
        }
        // What is left of a window goes back before a hold is paid for.
        if turn.taken > 0 && linger.took(turn.now, turn.first_stamp, &mut budget) {
            wakes.on_beat += 1;
        }
        if let Some(release_ns) = turn.leaving {
            linger.leaving(turn.now, release_ns);
        }
        if turn.taken > 0 || changes_waiting(pairs) {
            continue;
        }
        // Sleep until the model's next event less the learnt wake-up overshoot,
        // then go round the loop (taking frames) until it is due: a multi-hop
        // packet's last hop, and a scheduled packet with little delay after
        // its service, are decided at their release time, so a late wake-up
        // would be lateness on the wire.
        let now = clock::now_ns();
        budget.tick(now);
        if lingers(&mut linger, &mut budget, &mut realtime, now) {
            continue;
        }
        let spin = if budget.frugal {
            MIN_SPIN_NS
        } else {
            // Rare timed events: the spin covers nearly every wake-up.
            wake.wake_ns(opts.spin_ns)
        };
        let beat = on_beat(
            &mut linger,
            &mut budget,
            &mut realtime,
            now,
            &turn,
            &beat_wake,
        );
        let Some(awake_from) = beat else { continue };
        let limit_ns = wait_limit_ns(pairs, woken_by_fds, turn.sweep_at, now);
        let event_sleep_ns = match turn.next {
            Some(t) if t.saturating_sub(now) <= spin => {
                budget.spun_ns += LOOP_NS;
                std::hint::spin_loop();
                continue;
            }
            Some(t) => Some(limit_ns.map_or(t - now - spin, |l| (t - now - spin).min(l))),
            None => limit_ns,
        };
        let beat_sleep_ns = awake_from.map(|t| t - now);
        let sleep_ns = earliest(event_sleep_ns, beat_sleep_ns);
        let timed = turn.next.is_some() || awake_from.is_some();
        if let Some(rt) = realtime.as_mut() {
            // Failing to return to SCHED_FIFO costs precision, not packets.
            let _ = if timed {
                rt.wait_mode()
            } else {
                rt.idle_mode()
            };
        }
        match wait_all(pairs, &mut fds, &mut owners, &wake_fds, sleep_ns) {
            Ok(waited) => {
                if let (true, true, Some(ns)) = (waited.timed_out, timed, sleep_ns) {
                    let learnt = match beat_sleep_ns == Some(ns) {
                        true => &mut beat_wake,
                        false => &mut wake,
                    };
                    learnt.observe(clock::now_ns().saturating_sub(now + ns));
                }
                after_errors(pairs, waited, wakes, &mut error_wakes);
            }
            Err(e) => {
                for p in pairs.iter() {
                    p.fail(format!("receive: {e}"));
                }
                break;
            }
        }
        wakes.wakeups += 1;
        recheck_down(pairs, &mut down_checked_ns, wakes);
    }
    for p in pairs.iter_mut().filter(|p| !p.stopped) {
        p.finish(wakes);
    }
}

/// Whether a change request waits for a pair: the stage takes it before
/// it sleeps.
fn changes_waiting<M>(pairs: &[PairLoop<M>]) -> bool {
    pairs
        .iter()
        .any(|p| p.shared.has_changes.load(Ordering::Acquire))
}

/// Whether the stage goes round once more at `now_ns` instead of sleeping
/// because it lingers ([`Linger::keep_polling`]): an answer to what it just
/// sent often arrives within tens of µs, and taken while lingering it costs
/// no wake-up.
fn lingers(
    linger: &mut Linger,
    budget: &mut SpinBudget,
    realtime: &mut Option<Realtime>,
    now_ns: u64,
) -> bool {
    if !linger.keep_polling(now_ns, budget) {
        return false;
    }
    if linger.holding(now_ns) {
        // Through a hold nothing can answer yet: the stage stays in
        // the policy it woke in (under SCHED_FIFO, as its timed
        // wait would end), since a change is a system call each way
        // (2-4 more per exchange: ping RTT through `delay 50us`
        // rose 8-24 µs). It still yields: spinning without, the
        // output threads woke about twice as often (0.07-0.17
        // against 0.02-0.07 per packet, docs/numbers.md).
        std::thread::yield_now();
        return true;
    }
    if let Some(rt) = realtime.as_mut() {
        // Failing to leave SCHED_FIFO costs the hosts' time, not packets.
        let _ = rt.linger_mode();
    }
    // Lets a host on this core (the one that answers) run first.
    std::thread::yield_now();
    true
}

/// A frame due on a port's beat (`turn.expected`): None when the stage
/// goes round once more, awake through the window, at ordinary priority as
/// it lingers (the host that sends must be able to run on its core); else
/// when its sleep is to end for the window (the learnt lateness of these
/// long sleeps, `beat_wake`, before it), or None inside: none paid for.
fn on_beat(
    linger: &mut Linger,
    budget: &mut SpinBudget,
    realtime: &mut Option<Realtime>,
    now_ns: u64,
    turn: &Turn,
    beat_wake: &WakeEstimate,
) -> Option<Option<u64>> {
    let lead_ns = beat_wake.spin_ns(LEAD_PPM, LEAD_MAX_NS);
    // A frame held longer than the stage takes to wake leaves on time
    // from its arrival's wake-up (the hold counts from its stamp): no
    // window buys it anything (through `delay 200us` at 100 pps windows
    // cost 2.6 % of a core and moved no median).
    let expected = turn
        .expected
        .filter(|_| turn.held_ns.is_none_or(|h| h < lead_ns));
    let awake_from = linger.expecting(now_ns, expected, lead_ns, budget);
    if awake_from.is_none_or(|t| t > now_ns) {
        return Some(awake_from);
    }
    if !linger.awake(now_ns, budget) {
        return Some(None);
    }
    if let Some(rt) = realtime.as_mut() {
        let _ = rt.linger_mode();
    }
    std::thread::yield_now();
    None
}

/// The most the stage wakes before a window of expected arrivals: the
/// lateness of a long sleep on a loaded VM, not a preemption's.
const LEAD_MAX_NS: u64 = 1_000_000;

/// The share of the stage's long sleeps that the lead before a window
/// covers: 90 %, not the 99 % a release's spin covers. A wake-up later than
/// the lead still finds the frame unless it is later than the frame too,
/// which comes at the window's middle or later; the 99th percentile is where
/// a few of this VM's stalls put it (1 ms, the cap, in runs where the 90th
/// was 200-260 µs), and a window that long took the credit of the next ones:
/// two beats through one port, 20 and 30 ms apart, found the stage awake for
/// 141-304 of 333 frames with the 99th (141 and 166 where it stood at 1 ms),
/// and for 296-313 with the 90th (docs/numbers.md, "A yield that loses the
/// core").
const LEAD_PPM: u32 = 900_000;

/// One turn of every running pair, what they found together (the latest
/// pair's `now`); None once every pair has stopped.
fn turn_all<M: LiveModel>(
    pairs: &mut [PairLoop<M>],
    opts: &LiveOptions,
    wakes: Wakes,
) -> Option<Turn> {
    let mut all = Turn {
        taken: 0,
        first_stamp: None,
        leaving: None,
        full: false,
        next: None,
        sweep_at: None,
        expected: None,
        held_ns: None,
        now: 0,
    };
    for p in pairs.iter_mut().filter(|p| !p.stopped) {
        match p.turn(opts, wakes) {
            Ok(t) => {
                all.taken += t.taken;
                all.first_stamp = earliest(all.first_stamp, t.first_stamp);
                all.leaving = earliest(all.leaving, t.leaving);
                all.full |= t.full;
                all.next = earliest(all.next, t.next);
                all.sweep_at = earliest(all.sweep_at, t.sweep_at);
                if sooner_window(all.expected, t.expected) != all.expected {
                    (all.expected, all.held_ns) = (t.expected, t.held_ns);
                }
                all.now = t.now;
            }
            // One pair's failure stops that pair only.
            Err(e) => p.stop_pair(e, wakes),
        }
    }
    (!pairs.iter().all(|p| p.stopped)).then_some(all)
}

/// The earliest-starting window of `cadence`'s ports not over at `now_ns`.
fn expected_window(cadence: &[Beats; 2], now_ns: u64) -> Option<(u64, u64)> {
    cadence
        .iter()
        .filter_map(|c| c.window(now_ns))
        .fold(None, |a, w| sooner_window(a, Some(w)))
}

fn sooner_window(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<(u64, u64)> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// After a wait: the pairs whose sockets reported an error are asked for
/// their ports' state. A socket error that reading did not clear would wake
/// every poll at once: after a few in a row (`error_wakes`) the stage waits
/// between polls instead of spinning.
fn after_errors<M: LiveModel>(
    pairs: &mut [PairLoop<M>],
    waited: Waited,
    wakes: Wakes,
    error_wakes: &mut u32,
) {
    for (i, sides) in waited.errored {
        pairs[i].check_health(sides, wakes);
    }
    if waited.errors {
        *error_wakes += 1;
        if *error_wakes > ERROR_WAKES_BEFORE_PAUSE {
            std::thread::sleep(std::time::Duration::from_nanos(IDLE_WAIT_NS));
        }
    } else {
        *error_wakes = 0;
    }
}

/// The longest the stage may sleep with no model event due: until its next
/// sweep of idle flows when every change and the stop wake it (None: no
/// limit), else [`IDLE_WAIT_NS`]; at most [`PortHealth::DOWN_CHECK_NS`]
/// while an interface is down (asked again until it is up or gone).
fn wait_limit_ns<M>(
    pairs: &[PairLoop<M>],
    woken_by_fds: bool,
    sweep_at: Option<u64>,
    now: u64,
) -> Option<u64> {
    let limit_ns = if woken_by_fds {
        sweep_at.map(|t| t.saturating_sub(now).max(1))
    } else {
        Some(IDLE_WAIT_NS)
    };
    if !any_down(pairs) {
        return limit_ns;
    }
    Some(limit_ns.map_or(PortHealth::DOWN_CHECK_NS, |l| {
        l.min(PortHealth::DOWN_CHECK_NS)
    }))
}

/// Asks the ports whose interface is down for their state again, every
/// [`PortHealth::DOWN_CHECK_NS`] (`checked_ns`: when they last were).
fn recheck_down<M: LiveModel>(pairs: &mut [PairLoop<M>], checked_ns: &mut u64, wakes: Wakes) {
    let now = clock::now_ns();
    if any_down(pairs) && now.wrapping_sub(*checked_ns) >= PortHealth::DOWN_CHECK_NS {
        *checked_ns = now;
        for p in pairs.iter_mut() {
            let down = p.down;
            p.check_health(down, wakes);
        }
    }
}

/// The descriptors that wake the stage's poll (each pair's wake-up eventfd,
/// and `stop_fd`), and whether every change and the stop wake it (then the
/// poll needs no timeout of its own).
fn wake_fds_of<M>(pairs: &[PairLoop<M>], stop_fd: Option<RawFd>) -> (Vec<RawFd>, bool) {
    let mut wake_fds: Vec<RawFd> = pairs
        .iter()
        .filter_map(|p| p.shared.wake.as_ref().map(AsRawFd::as_raw_fd))
        .collect();
    let woken_by_fds = stop_fd.is_some() && wake_fds.len() == pairs.len();
    if let Some(fd) = stop_fd.filter(|fd| !wake_fds.contains(fd)) {
        wake_fds.push(fd);
    }
    (wake_fds, woken_by_fds)
}

/// Whether a running pair has a receive port whose interface is down.
pub(super) fn any_down<M>(pairs: &[PairLoop<M>]) -> bool {
    pairs
        .iter()
        .any(|p| !p.stopped && p.down.iter().any(|d| *d))
}

/// Polls that found a socket error ([`RxPort::poll_error`]) in a row, with no
/// frame taken between, after which the stage pauses [`IDLE_WAIT_NS`] between
/// polls rather than spin on an error that does not clear.
pub(super) const ERROR_WAKES_BEFORE_PAUSE: u32 = 3;

/// What [`wait_all`] found.
pub(super) struct Waited {
    /// The time passed with nothing ready.
    pub(super) timed_out: bool,
    /// A socket reported an error.
    pub(super) errors: bool,
    /// Pairs (by index) with a socket that reported an error or a health
    /// descriptor that woke ([`RxPort::health_fd`]), by side: their ports are
    /// asked for their state ([`PairLoop::check_health`]).
    pub(super) errored: Vec<(usize, [bool; 2])>,
}

/// Sleeps until a frame may be waiting on one of the running pairs' ports, a
/// change or stop was signalled (one of `wake_fds` readable; it is drained
/// here) or `timeout_ns` passed (None: no timeout). A socket that polls with
/// an error (its interface down or gone), or a port's health descriptor that
/// woke, names its pair and side in [`Waited::errored`]: the port is asked
/// for its state ([`RxPort::health`]), which reads the error or the
/// notifications, so the next poll sleeps.
pub(super) fn wait_all<M: LiveModel>(
    pairs: &mut [PairLoop<M>],
    fds: &mut Vec<RawFd>,
    owners: &mut Vec<(usize, usize)>,
    wake_fds: &[RawFd],
    timeout_ns: Option<u64>,
) -> io::Result<Waited> {
    let mut waited = Waited {
        timed_out: false,
        errors: false,
        errored: Vec::new(),
    };
    fds.clear();
    owners.clear();
    let mut unsupported = Vec::new();
    for (i, p) in pairs.iter_mut().enumerate().filter(|(_, p)| !p.stopped) {
        for (side, port) in p.rx.iter_mut().enumerate() {
            match port.wait_fds(fds)? {
                WaitFds::Ready => return Ok(waited),
                WaitFds::Added => owners.resize(fds.len(), (i, side)),
                WaitFds::Unsupported => unsupported.push(port),
            }
        }
    }
    if !unsupported.is_empty() {
        let turn = timeout_ns.map_or(TURN_NS, |t| (t / 2).clamp(1, TURN_NS));
        for port in unsupported {
            port.wait_rx(turn)?;
        }
        return Ok(waited);
    }
    // Readable when an interface may have changed: its port is asked, as
    // after a socket error, but this is no error to pause for.
    let first_health = fds.len();
    for (i, p) in pairs.iter().enumerate().filter(|(_, p)| !p.stopped) {
        for (side, port) in p.rx.iter().enumerate() {
            if let Some(fd) = port.health_fd() {
                fds.push(fd);
                owners.push((i, side));
            }
        }
    }
    let first_wake = fds.len();
    fds.extend_from_slice(wake_fds);
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = timeout_ns.map(|t| libc::timespec {
        tv_sec: (t / 1_000_000_000) as libc::time_t,
        tv_nsec: (t % 1_000_000_000) as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // Safety: pfds and ts (when given) are valid for the call; a null
    // timeout waits without end; no signal mask is given.
    let r = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            ts_ptr,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
        return Ok(waited);
    }
    for (k, p) in pfds[..first_wake].iter().enumerate() {
        let health = k >= first_health;
        if p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) == 0
            && !(health && p.revents != 0)
        {
            continue;
        }
        let (i, side) = owners[k];
        waited.errors |= !health;
        match waited.errored.iter_mut().find(|(j, _)| *j == i) {
            Some((_, sides)) => sides[side] = true,
            None => {
                let mut sides = [false; 2];
                sides[side] = true;
                waited.errored.push((i, sides));
            }
        }
    }
    for p in pfds[first_wake..].iter().filter(|p| p.revents != 0) {
        let mut count = [0u8; 8];
        // Safety: reads at most 8 bytes into a live buffer from an owned,
        // non-blocking eventfd.
        let _ = unsafe { libc::read(p.fd, count.as_mut_ptr().cast(), count.len()) };
    }
    waited.timed_out = r == 0;
    Ok(waited)
}

//! The live stage (`linkem bridge`, with link words or `--rules`): one thread
//! owning one [`Model`] for both directions, fed by both receive ports and
//! feeding the two output stages. The same code runs the plain link
//! ([`LinkModel`], one closed-form link per side) and Dummynet's node
//! ([`Node`], whose pipes fed from both directions are one shared medium,
//! Dummynet Revisited §3.1, and so cannot be split over two threads); it is
//! monomorphised per model.
//!
//! ```text
//!  IF_A ─rx─┐                                                   ┌─▶ delay line a->b ─▶ output stage ─tx─▶ IF_B
//!           ├─▶ stamp ─▶ cut ─▶ FlowKey? ─▶ Model ─▶ decisions ──┤
//!  IF_B ─rx─┘  (side A / B)                  (held until decided) └─▶ delay line b->a ─▶ output stage ─tx─▶ IF_A
//! ```
//!
//! - **Pairs.** The stage may serve several interface pairs
//!   ([`LiveBridge::start_group`]), each with its own model, stage state,
//!   delay lines, change queue and counts: each turn takes one batch of every
//!   pair in order (a pair's arrivals wait at most one batch of each other
//!   pair), and the poll below covers every pair's ports and wake-up eventfd,
//!   with the earliest of their next events as timeout. What follows holds
//!   per pair.
//! - **Waiting.** One poll(2) over the sockets of both receive ports
//!   ([`RxPort::wait_fds`]) and the stage's wake-up eventfd (changes, stop),
//!   with a timeout up to the model's next event ([`Model::next_event_ns`]: a
//!   scheduler service or a multi-hop reinjection), so scheduled pipes are
//!   served on time with no traffic arriving, or to the next sweep of idle
//!   flow instances while the model holds any; with none of these the poll
//!   has no timeout: an idle stage does not wake.
//! - **Lingering.** Before it sleeps, a stage whose frames left less than
//!   [`LiveOptions::linger_ns`] ago (released at once or soon after it took
//!   them; not frames stored for a later release: nothing can answer those
//!   yet) goes round its loop instead (non-blocking receives, `sched_yield`
//!   between turns, at ordinary priority: a host woken on the stage's core by
//!   the frame just sent must be able to answer), so an answer in the other
//!   direction is taken without a wake-up ([`wait::Linger`]: charged to the
//!   spin budget, at most a quarter of a core per 10 ms window, never without
//!   frames that left recently). A ping's answer needs none of this (it comes
//!   back inside the stage's send, the receiving host's kernel path running
//!   in the send call on veth); a host process's answer (a UDP or TCP server)
//!   comes 50-100 µs later, after its own wake-up.
//! - **Arrivals.** A received frame is one of: a super-frame (TSO/GSO/USO from
//!   the host, or merged by GRO; `offload.gso`), cut with
//!   [`linkem_core::wire::segment`] into frames of at most the egress
//!   `max_frame_bytes` *before* the model sees it, so rate, queue limits, loss
//!   and duplication apply per wire frame (the extra frames counted in
//!   `segmented`); a frame whose L4 checksum the sender left to the hardware,
//!   finished in its delay-line record as it is stored; any other frame,
//!   stored unchanged. A frame longer than the egress can send is `too-big`:
//!   never truncated, never given to the model. The flow key is parsed only
//!   when the model reads headers ([`Model::reads_headers`]).
//! - **Whole pass-through.** Cutting a 64 KiB TSO super-frame costs ~45
//!   checksums and copies, and coalescing on transmit then verifies and
//!   copies each wire frame again to rebuild what the host had sent. So
//!   where that rebuild would happen anyway (coalescing on and the egress
//!   sends super-frames, [`crate::port::TxPort::sends_super_frames`]), for a
//!   port that wants no frames back (not a netfilter queue), a TCP
//!   super-frame whose checksum was left at its TCP header (and that carries
//!   no CWR, which the offload sent could not keep on its first segment
//!   only) is first *planned* rather than cut
//!   ([`linkem_core::wire::segment_plan`]: the lengths `segment` would cut,
//!   from the headers alone). Each wire frame still goes to the model, with
//!   the length, stamp and tag cutting gives it, and when the model reads
//!   headers (rules) with the key cutting gives it, derived from the
//!   super-frame's ([`FlowKey::of_segment`]: only the IP length and TCP flags
//!   differ between segments). The tap, when there is one, still gets each
//!   wire frame's bytes: the super-frame is then cut for it. If every decision comes at once and is the same
//!   plain one (delivered, no duplicate, no corrupt bits, no CE mark, one
//!   release time, pipe and queue; so: no `rate`, no jitter), the
//!   super-frame is stored as one delay-line record with its offload (the
//!   segment size the egress allows) and its number of wire frames
//!   ([`Producer::push_whole`]), and the output stage sends it whole, its
//!   wire frames counted as sent (or late, or flushed) one by one with one
//!   lateness, and in `whole`. At the first decision that differs (or comes
//!   later, or a decision of another packet in between) the super-frame is
//!   cut after all: the wire frames decided so far are stored one by one
//!   with their decisions, and the rest go on as any wire frame does, so
//!   the model's inputs, the counts, the recording and what is stored, in
//!   which order, are those of cutting first; a super-frame never spans
//!   decisions that differ. Cost: the pass-through costs what the headers
//!   take to read; a fallback costs the cut it would have cost anyway.
//! - **Stamps.** An arrival's stamp is the kernel's, never before the stage
//!   started (frames waiting in the ring while the sockets opened would
//!   otherwise be late at once), and clamped to the last instant given to the
//!   model: `t = max(kernel stamp, started, last)`, so the model's time never
//!   goes backwards although the two ports' batches are taken one after the
//!   other. That clamped `t` is what the model, the events and the recording
//!   see ([`Tap`]), so a replay of the recording sees the same inputs.
//! - **Decisions** may come at the arrival or later (scheduled pipes, one-pass
//!   off). The bytes of a packet not yet decided are kept, by tag, until its
//!   decision; a delivered packet goes, with its duplicate copy, corrupt bits
//!   and CE mark applied ([`Decision::apply_to_frame`]), into the delay line
//!   of the direction it was received for (side A to IF_B). Releases need not
//!   follow arrival order (pipes, reordering), so the output stages run with
//!   their reorder heap over sorted runs (copies only when a record is out of
//!   order).
//! - **Sending.** After each batch the stage sends what is due itself, up to
//!   [`Outputs::STAGE_SHARE_FRAMES`] per direction, and takes on a release due
//!   before the output stage could be woken for it, going round its loop
//!   (taking frames) until then; the output stage is woken for the rest
//!   ([`Outputs::hand_out`], the `output` module doc): sparse traffic (a ping,
//!   a request) pays no second wake-up, and bulk traffic is still sent by the
//!   output stage, on the other core, beside the stage's receiving; a
//!   super-frame stored whole counts its wire frames against the share, so
//!   it is the output stage's, but for one per turn while the output thread
//!   is parked (a wake-up of the other core per 64 KiB cost more than the
//!   send). The
//!   stage of several pairs does so for each pair's directions, through each
//!   direction's own outlet.
//! - **Events on time.** The stage sleeps until the model's next event less
//!   the wake-up overshoot it has learnt (as the output stage does), then
//!   goes round its loop until the event is due, within the same spin budget.
//! - **Changes** ([`LiveBridge::submit`]: `linkem ctl`, SIGHUP) reach the
//!   model only on this thread: a caller queues `(changes, reply)` (at most
//!   [`MAX_PENDING_CHANGES`] requests) and wakes the stage; between two
//!   batches the stage takes `now`, runs `poll(now)`, checks every change of
//!   the request ([`LiveModel::check`]: all or none), applies them in order at
//!   `now` and replies with `now`. So every input (arrival, poll, change)
//!   reaches the model in one sequence from one thread, which is what a
//!   recording keeps. Each packet stored carries its pipe's group in the delay
//!   line; a pipe deleted by a change has its group flushed, so its packets not
//!   yet sent are counted as `flushed` by the output stage.
//! - **Idle flows** are removed by time, every [`SWEEP_EVERY_NS`] with or
//!   without traffic ([`Model::expire_idle`]); once the memory charged for
//!   flow instances has fallen [`TRIM_AFTER_BYTES`] below its peak since
//!   the last trim, the heap's free pages go back to the system.
//! - **Shedding.** Once per batch: while an output stage is more than max-lag
//!   behind (stuck on frames due that long ago), its direction stores nothing
//!   (counted `backpressure`): new frames would only fill the line to be
//!   dropped late, and copying them costs the time the machine lacks.
//!
//! Cost: one model thread serves both directions, so the two directions
//! share one core's worth of model work where the plain link had one input
//! thread each; a direction's arrivals wait while the other's batch is
//! decided (at most one batch, [`LiveOptions::batch`] frames).
//!
//! Counting: each direction keeps the invariant of [`super::DirectionStats`]
//! (`received + segmented = fates.arrived() + in_flight`); packets the model
//! holds count as in flight; counts are published under each direction's lock
//! once per batch.
use super::objects::{Objects, ObjectsSnapshot};
use super::output::{output_stage, stage_sends, Left, Outlet, OutputConfig};
use super::output_group::output_group;
use super::wait::{self, set_realtime, Linger, Realtime, SpinBudget, WakeEstimate, MIN_SPIN_NS};
use super::wire::{cut, finish, whole_plan, Csum, Cut, KERNEL_DROPS_EVERY_NS};
use super::{Control, Direction, DirectionStats};
use crate::clock;
use crate::delay_line::{delay_line, delay_line_with, Producer, Whole, LAZY_FIRST_RESIDENT_BYTES};
use crate::port::{PortHealth, RxFrame, RxPort, TxPort, WaitFds};
use linkem_core::model::{Change, ChangeError, LinkModel, Model};
use linkem_core::node::{Decision, Node, PacketIn};
use linkem_core::rules::{FlowKey, L2Kind, Side, SocketOwner};
use linkem_core::wire::{segment, Offload, SegmentPlan};
use linkem_core::{Fate, FateCounts};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{JoinHandle, Thread};

/// Longest wait in poll with nothing due when no eventfd can wake the stage
/// for a stop or a change (eventfd(2) failed), so that it notices them; with
/// one, an idle stage sleeps until a frame, a change, a stop or its next
/// sweep of idle flow instances.
const IDLE_WAIT_NS: u64 = 10_000_000;
/// How often the stage removes idle flow instances without waiting for a
/// packet to their pipe ([`Model::expire_idle`]): an instance goes at most
/// this long after its hold ends.
const SWEEP_EVERY_NS: u64 = 100_000_000;
/// Charged flow memory released since the last trim after which freed heap
/// pages are given back to the system ([`crate::mem::release_free_memory`]).
const TRIM_AFTER_BYTES: usize = 16 << 20;
/// Ports without sockets (in-memory tests) are waited on in turn, this long each.
const TURN_NS: u64 = 200_000;
/// What one turn of the loop while spinning to an event is counted as, for
/// the spin budget (a turn takes both ports' non-blocking receive calls).
const LOOP_NS: u64 = 1_000;
/// Change requests waiting for the stage at most; more are refused as busy
/// (each control connection has one request outstanding, so this bounds
/// nothing a well-behaved client reaches).
pub const MAX_PENDING_CHANGES: usize = 256;
/// How long [`LiveBridge::submit`] spins for the stage's reply before it
/// sleeps on it: the stage answers within a batch when busy, within a wake-up
/// when idle; a sleeping caller adds a second wake-up to every change.
const REPLY_SPIN_NS: u64 = 50_000;

/// What the live stage needs of a model beyond [`Model`]: checking a change
/// before any of a request is applied, and the objects a change may delete.
pub trait LiveModel: Model + Send + 'static {
    /// Whether `change` would apply; [`Model::apply`] of a change that passed
    /// does not fail. Checked for every change of a request before the first
    /// is applied, so a request applies whole or not at all.
    fn check(&self, change: &Change) -> Result<(), ChangeError>;

    /// Numbers of the pipes the model has now (their packets in the delay
    /// line are flushed when a change deletes them).
    fn pipe_numbers(&self) -> Vec<u32> {
        Vec::new()
    }

    /// Memory charged for per-flow state, bytes.
    fn flow_memory_bytes(&self) -> usize {
        0
    }
}

impl LiveModel for LinkModel {
    fn check(&self, change: &Change) -> Result<(), ChangeError> {
        match change {
            Change::Link { .. } => Ok(()),
            _ => Err(ChangeError::NoRuleSet),
        }
    }
}

impl LiveModel for Node {
    fn check(&self, change: &Change) -> Result<(), ChangeError> {
        match change {
            Change::Link { .. } => Err(ChangeError::NoLink),
            _ => Ok(()),
        }
    }

    fn pipe_numbers(&self) -> Vec<u32> {
        self.pipes().iter().map(|p| p.def.number).collect()
    }

    fn flow_memory_bytes(&self) -> usize {
        Node::flow_memory_bytes(self)
    }
}

/// What sees the model's inputs and outputs as they happen, on the stage's
/// thread (the `--events` writer, the `--record` recorder): it must only copy
/// into a bounded queue, never block.
pub trait Tap: Send {
    /// A wire frame given to the model: its side, the stamp the model got,
    /// its bytes as cut (before any checksum is finished).
    fn frame(&mut self, side: Side, ts_ns: u64, bytes: &[u8]);
    /// A decision of the model, in decision order, for a packet that arrived
    /// at `arrival_ns` with `len_bytes`.
    fn decision(&mut self, arrival_ns: u64, len_bytes: u32, d: &Decision);
    /// A request of changes the model took at `at_ns`, before they apply.
    fn changes(&mut self, at_ns: u64, changes: &[Change]);
    /// The instant the stage started, which is the model's start
    /// ([`Model::start`]) and the earliest stamp: given once, before any
    /// frame, on the thread that starts the bridge.
    fn start(&mut self, _t0_ns: u64) {}
}

/// Why [`LiveBridge::submit`] applied nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// A change does not fit the model.
    #[error("{0}")]
    Refused(#[from] ChangeError),
    /// The stage has stopped (the bridge is ending).
    #[error("the bridge is stopping: change not applied")]
    Stopped,
    /// [`MAX_PENDING_CHANGES`] requests are waiting already.
    #[error("too many changes waiting for the emulator: try again")]
    Busy,
    /// A change would make the model duplicate packets and a send port
    /// cannot send a packet twice ([`TxPort::no_copies`], the reason given).
    #[error("'duplicate' is not available {0}")]
    NoCopies(&'static str),
}

/// What the live stage starts with; per direction `[a->b, b->a]`.
pub struct LiveOptions {
    /// For messages and stats: the names of the two directions ("a->b", "b->a").
    pub names: [String; 2],
    /// Size of each direction's delay line, as
    /// [`super::DirectionOptions::buffer_bytes`].
    pub buffer_bytes: [usize; 2],
    /// The most the output stages (and the live stage, waiting for the
    /// model's next event) spin before a deadline, as
    /// [`super::DirectionOptions::spin_ns`].
    pub spin_ns: u64,
    /// Whether the output stages spin to releases even while every core of
    /// the machine is taken (`--spin-threshold` given); otherwise they sleep
    /// to them then (see `wait::CoreWatch`).
    pub spin_always: bool,
    /// As [`super::DirectionOptions::max_lag_ns`], for both output stages;
    /// the live stage sheds arrivals of a direction whose output stage is
    /// that far behind.
    pub max_lag_ns: Option<u64>,
    /// Frames taken per receive call from each port, as
    /// [`super::DirectionOptions::batch`].
    pub batch: usize,
    /// How long the stage keeps polling its ports after the last arrival
    /// before it sleeps ([`wait::Linger`]); 0: it sleeps as soon as a turn
    /// takes nothing. Default [`wait::DEFAULT_LINGER_NS`].
    pub linger_ns: u64,
    /// As [`super::DirectionOptions::realtime_priority`], for the live stage
    /// (while it waits) and the output stages.
    pub realtime_priority: Option<i32>,
    /// The live stage stays under SCHED_FIFO even when busy.
    pub realtime_input: bool,
    /// Coalesce TCP wire frames of one flow due within this window into
    /// super-frames on transmit, where the send port can
    /// ([`crate::port::TxPort::sends_super_frames`]); `None`: off. Default
    /// [`super::DEFAULT_COALESCE_WINDOW_NS`].
    pub coalesce_window_ns: Option<u64>,
    /// With `realtime_priority`: the stages hold SCHED_FIFO only while they
    /// wait for an instant (a release, a scheduler's service), not while
    /// they wait for traffic (`wait::Realtime`).
    pub realtime_timed_only: bool,
    /// Sees every frame, decision and change ([`Tap`]), if any.
    pub tap: Option<Box<dyn Tap>>,
}

impl LiveOptions {
    /// The defaults of [`super::DirectionOptions::new`] for both directions,
    /// with delay lines of `buffer_bytes` each.
    pub fn new(buffer_bytes: usize) -> LiveOptions {
        LiveOptions {
            names: ["a->b".into(), "b->a".into()],
            buffer_bytes: [buffer_bytes; 2],
            spin_ns: wait::DEFAULT_SPIN_NS,
            spin_always: false,
            max_lag_ns: Some(super::DEFAULT_MAX_LAG_NS),
            batch: super::DEFAULT_BATCH,
            linger_ns: wait::DEFAULT_LINGER_NS,
            realtime_priority: None,
            realtime_input: false,
            coalesce_window_ns: Some(super::DEFAULT_COALESCE_WINDOW_NS),
            realtime_timed_only: false,
            tap: None,
        }
    }
}

/// A request of changes waiting for the stage, and where its answer goes.
type Request = (Vec<Change>, SyncSender<Result<u64, SubmitError>>);

struct Shared<M> {
    stop: AtomicBool,
    /// The model and the state that settles its decisions: held by the stage
    /// for each batch, and briefly by readers ([`LiveBridge::with_model`]).
    core: Mutex<Core<M>>,
    /// Per pipe and queue counts ([`super::objects`]); locked after `core`.
    objects: Mutex<Objects>,
    /// Readers waiting for the core's lock: the stage yields after its
    /// batch, so that a busy stage does not keep taking the lock back at once.
    wanted: AtomicUsize,
    /// Change requests for the stage, oldest first.
    changes: Mutex<VecDeque<Request>>,
    has_changes: AtomicBool,
    /// Written to wake the stage from its poll when a change is queued.
    wake: Option<OwnedFd>,
    /// Why a send port cannot send a packet twice, if one cannot: changes
    /// that duplicate are then refused before they reach the model.
    no_copies: Option<&'static str>,
}

struct Core<M> {
    model: M,
    stage: Stage,
}

/// A running bridge of two directions through one model.
pub struct LiveBridge<M: LiveModel> {
    directions: Vec<Direction>,
    shared: Arc<Shared<M>>,
    thread: Option<JoinHandle<()>>,
}

/// The bridge of `linkem bridge --rules`.
pub type NodeBridge = LiveBridge<Node>;

impl<M: LiveModel> LiveBridge<M> {
    /// Starts the live stage and the two output stages. `rx[0]`/`tx[0]`:
    /// IF_A's receive half and IF_B's send half (direction a->b, side A).
    // Kept whole: the start sequence; the stage's thread takes what setting up the output stages left.
    pub fn start(
        mut opts: LiveOptions,
        model: M,
        rx: [Box<dyn RxPort>; 2],
        tx: [Box<dyn TxPort>; 2],
    ) -> Result<LiveBridge<M>, String> {
        let mut directions = Vec::new();
        let mut producers = Vec::new();
        let mut outlets = Vec::new();
        let mut max_frame = [0usize; 2];
        let mut supers = [false; 2];
        let no_copies = tx.iter().find_map(|t| t.no_copies());
        for (i, tx) in tx.into_iter().enumerate() {
            let (producer, consumer) = delay_line(opts.buffer_bytes[i])?;
            let mut control = Control::new(producer.uses_huge_pages(), producer.capacity_bytes());
            control.held = super::HeldPerGroup::new(tx.max_held_per_pipe());
            let control = Arc::new(control);
            max_frame[i] = tx.max_frame_bytes();
            supers[i] = opts.coalesce_window_ns.is_some() && tx.sends_super_frames();
            let cfg = output_config(&opts);
            let prio = opts.realtime_priority;
            let timed_only = opts.realtime_timed_only;
            let outlet = Outlet::new(control.clone(), consumer, tx, &cfg);
            outlets.push(outlet.clone());
            let out = {
                let control = control.clone();
                std::thread::Builder::new()
                    .name(format!("linkem-out-{}", opts.names[i]))
                    .spawn(move || {
                        let mut realtime = prio.map(|p| wait::Realtime::new(p, timed_only));
                        if let Some(Err(e)) = realtime.as_mut().map(wait::Realtime::wait_mode) {
                            control.fail(format!("output stage: {e}"));
                        }
                        output_stage(outlet, cfg, realtime)
                    })
                    .map_err(|e| format!("cannot start the output thread: {e}"))?
            };
            producers.push(producer);
            directions.push(Direction {
                name: opts.names[i].clone(),
                control,
                threads: vec![out],
            });
        }
        let controls = [directions[0].control.clone(), directions[1].control.clone()];
        let outputs = [
            directions[0].threads[0].thread().clone(),
            directions[1].threads[0].thread().clone(),
        ];
        let producers: [Producer; 2] = producers
            .try_into()
            .map_err(|_| "two delay lines".to_string())?;
        let outlets: [Arc<Outlet>; 2] =
            outlets.try_into().map_err(|_| "two outlets".to_string())?;
        let out = Outputs::new(outlets, outputs);
        let stage = Stage::new(
            opts.names.clone(),
            controls.clone(),
            producers,
            max_frame,
            supers,
            opts.tap.take(),
        );
        let shared = Shared::started(model, stage, no_copies);
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("linkem-stage".into())
                .spawn(move || {
                    let realtime = stage_realtime(&opts, |e| {
                        for c in &controls {
                            c.fail(e.clone());
                        }
                    });
                    let mut pairs = [PairLoop::new(shared.clone(), controls, rx, out)];
                    let stop_fd = shared.wake.as_ref().map(AsRawFd::as_raw_fd);
                    live_stage(&mut pairs, &shared.stop, stop_fd, &opts, realtime);
                    // Requests that came too late are answered, not left waiting.
                    for (_, reply) in lock(&shared.changes).drain(..) {
                        let _ = reply.try_send(Err(SubmitError::Stopped));
                    }
                })
                .map_err(|e| format!("cannot start the stage thread: {e}"))?
        };
        Ok(LiveBridge {
            directions,
            shared,
            thread: Some(thread),
        })
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
        if self.shared.stop.load(Ordering::Acquire) {
            return Err(SubmitError::Stopped);
        }
        if let Some(why) = self.shared.no_copies {
            if changes.iter().any(Change::duplicates) {
                return Err(SubmitError::NoCopies(why));
            }
        }
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
        if let Some(t) = &self.thread {
            // Ports without sockets wait in turns; a parked stage wakes.
            t.thread().unpark();
        }
        wait_reply(&answer)
    }

    /// Stops the live stage, then the output stages (packets still in the
    /// delay lines are not sent); returns the final counts. The model stays
    /// readable with [`LiveBridge::with_model`].
    pub fn stop(&mut self) -> Vec<DirectionStats> {
        self.halt();
        self.directions.drain(..).map(Direction::stop).collect()
    }

    /// The tap given at start, once the stage has stopped (to finish it).
    pub fn take_tap(&mut self) -> Option<Box<dyn Tap>> {
        self.halt();
        lock(&self.shared.core).stage.tap.take()
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            // The stage may be asleep in its poll with no timeout.
            if let Some(fd) = &self.shared.wake {
                kick(fd);
            }
            t.thread().unpark();
            let _ = t.join();
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
/// ([`super::output_group`]): three threads whatever the number of pairs.
/// [`LiveGroup::stop`] ends them; stop it before the pairs' [`LiveBridge`]s.
pub struct LiveGroup {
    stop: Arc<AtomicBool>,
    /// Wakes the live stage from its poll for the stop.
    wake: Option<Arc<OwnedFd>>,
    output_stop: Arc<AtomicBool>,
    stage: Option<JoinHandle<()>>,
    outputs: Vec<JoinHandle<()>>,
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
        for t in &self.outputs {
            t.thread().unpark();
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
        let stop = Arc::new(AtomicBool::new(false));
        let output_stop = Arc::new(AtomicBool::new(false));
        let wake = wake_fd().map(Arc::new);
        let mut group = LiveGroup {
            stop: stop.clone(),
            wake: wake.clone(),
            output_stop: output_stop.clone(),
            stage: None,
            outputs: Vec::new(),
        };
        let group_cfg = output_config(&opts);
        let mut sides: [Vec<Arc<Outlet>>; 2] = Default::default();
        let mut started = Vec::new();
        for pair in pairs {
            let mut controls = Vec::new();
            let mut producers = Vec::new();
            let mut outlets = Vec::new();
            let mut max_frame = [0usize; 2];
            let mut supers = [false; 2];
            let no_copies = pair.tx.iter().find_map(|t| t.no_copies());
            for (i, tx) in pair.tx.into_iter().enumerate() {
                // Most links of a lab are idle most of the time: each line
                // becomes resident as its traffic comes.
                let (producer, consumer) =
                    delay_line_with(pair.buffer_bytes[i], LAZY_FIRST_RESIDENT_BYTES)?;
                let mut control =
                    Control::new(producer.uses_huge_pages(), producer.capacity_bytes());
                control.held = super::HeldPerGroup::new(tx.max_held_per_pipe());
                let control = Arc::new(control);
                max_frame[i] = tx.max_frame_bytes();
                supers[i] = opts.coalesce_window_ns.is_some() && tx.sends_super_frames();
                let outlet = Outlet::new(control.clone(), consumer, tx, &group_cfg);
                sides[i].push(outlet.clone());
                outlets.push(outlet);
                controls.push(control);
                producers.push(producer);
            }
            started.push((
                pair.names, controls, producers, outlets, max_frame, supers, pair.model, pair.rx,
                no_copies,
            ));
        }
        for (i, dirs) in sides.into_iter().enumerate() {
            let cfg = group_cfg;
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
            group.outputs.push(thread);
        }
        let outputs = [
            group.outputs[0].thread().clone(),
            group.outputs[1].thread().clone(),
        ];
        let mut bridges = Vec::new();
        let mut loops = Vec::new();
        for (names, controls, producers, outlets, max_frame, supers, model, rx, no_copies) in
            started
        {
            let controls: [Arc<Control>; 2] = controls
                .try_into()
                .map_err(|_| "two directions".to_string())?;
            let producers: [Producer; 2] = producers
                .try_into()
                .map_err(|_| "two delay lines".to_string())?;
            let outlets: [Arc<Outlet>; 2] =
                outlets.try_into().map_err(|_| "two outlets".to_string())?;
            let out = Outputs::new(outlets, outputs.clone());
            let stage = Stage::new(
                names.clone(),
                controls.clone(),
                producers,
                max_frame,
                supers,
                None,
            );
            let shared = Shared::started(model, stage, no_copies);
            let directions = (0..2)
                .map(|i| Direction {
                    name: names[i].clone(),
                    control: controls[i].clone(),
                    threads: Vec::new(),
                })
                .collect();
            loops.push(PairLoop::new(shared.clone(), controls, rx, out));
            bridges.push(LiveBridge {
                directions,
                shared,
                thread: None,
            });
        }
        let thread = std::thread::Builder::new()
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
            .map_err(|e| format!("cannot start the stage thread: {e}"))?;
        group.stage = Some(thread);
        Ok((bridges, group))
    }
}

/// Wakes the stage polling on the eventfd `fd`.
fn kick(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // Safety: writes 8 bytes from a live buffer to an owned eventfd; a full
    // counter (EAGAIN) means the stage is woken already.
    let _ = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
}

/// The eventfd that wakes the live stage from its poll when a change is
/// queued or a stop asked; without one the stage looks at both every
/// [`IDLE_WAIT_NS`], and nothing is lost.
fn wake_fd() -> Option<OwnedFd> {
    // Safety: eventfd takes no pointers; a valid descriptor is owned below.
    let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    // Safety: `efd` was just opened and is owned by nothing else.
    (efd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(efd) })
}

impl<M: LiveModel> Shared<M> {
    /// A pair's state shared by its stage and its handle. The link starts when
    /// the stage does: no stamp is earlier, and a recording stores the instant
    /// (through the tap) so that its replay starts there too.
    fn started(mut model: M, mut stage: Stage, no_copies: Option<&'static str>) -> Arc<Self> {
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
            wake: wake_fd(),
            no_copies,
        })
    }
}

/// The stage thread's real-time policy: real-time throughout
/// (`realtime_input`), or only while it waits for an instant; `fail` hears
/// why real-time could not be had.
fn stage_realtime(opts: &LiveOptions, fail: impl Fn(String)) -> Option<Realtime> {
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
fn output_config(opts: &LiveOptions) -> OutputConfig {
    OutputConfig {
        spin_ns: opts.spin_ns,
        spin_always: opts.spin_always,
        max_lag_ns: opts.max_lag_ns,
        // Packets of different pipes (or reordered by the link) leave out of
        // arrival order; the stage counts the records it stores out of
        // order, so in-order runs are sent uncopied.
        reorders: true,
        sorted_runs: true,
        coalesce_window_ns: opts.coalesce_window_ns,
    }
}

/// Spins a little for the stage's answer, then sleeps on it.
fn wait_reply(answer: &Receiver<Result<u64, SubmitError>>) -> Result<u64, SubmitError> {
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One pair's output side, as the live stage sends on it (see the `output`
/// module doc).
struct Outputs {
    outlets: [Arc<Outlet>; 2],
    /// The threads that send for each direction (its own, or its group's).
    threads: [Thread; 2],
    /// Per direction, the release the stage took on itself: it goes round its
    /// loop (taking frames) until then, and sends it.
    claimed: [Option<u64>; 2],
}

impl Outputs {
    /// Frames of one direction the stage sends per turn at most; more due at
    /// once go to the output thread. Sending runs the receiving host's kernel
    /// path inside the send call (veth), so a stage that sent a bulk flow's
    /// every frame did the work of both cores on one: bulk TCP through
    /// `delay 0` fell to a third (188-195 against 558-618 Mbit/s, numbers.md).
    /// A few frames cover what waits for the stage's sends (a ping, an ACK, a
    /// request's first segments); a super-frame stored whole counts its
    /// wire frames, so the stage leaves it to the output thread (sending 64
    /// KiB to a veth runs the receiving host's stack in the send call: with
    /// the stage sending them, it took 86 % of linkem's cycles against the
    /// output thread's 12 % under bulk TCP, numbers.md), except one per turn
    /// while that thread is parked ([`Outlet::send_due_with`]): waking it
    /// for each super-frame cost more.
    pub(super) const STAGE_SHARE_FRAMES: usize = 4;

    fn new(outlets: [Arc<Outlet>; 2], threads: [Thread; 2]) -> Outputs {
        Outputs {
            outlets,
            threads,
            claimed: [None; 2],
        }
    }

    /// For each direction that got frames (`pushed`) or whose claimed
    /// release may be due: sends what is due by now, takes on the next
    /// release when the output thread could not wake for it in time
    /// ([`stage_sends`]), and otherwise wakes the output thread if parked.
    /// Returns how many frames the stage sent itself.
    fn hand_out(&mut self, pushed: [bool; 2]) -> Result<usize, String> {
        let mut stage_sent = 0;
        for (i, outlet) in self.outlets.iter().enumerate() {
            if !pushed[i] && self.claimed[i].is_none() {
                continue;
            }
            let c = outlet.control();
            // The output thread is awake and sending (it last found a frame
            // due, and neither waits for a later release nor parks): what is
            // due now is its, as under bulk traffic, which then keeps the
            // output thread's core and its super-frames.
            let output_sending = self.claimed[i].is_none()
                && c.output_ready_ns.load(Ordering::Relaxed) <= clock::now_ns();
            let (wake, sent) = if output_sending {
                (true, 0)
            } else {
                self.claimed[i] = None;
                // A parked output thread is not woken for one super-frame.
                let parked = c.output_parked.load(Ordering::Acquire);
                let (left, sent) =
                    outlet.send_due_with(&mut clock::now_ns, Self::STAGE_SHARE_FRAMES, parked)?;
                let now_ns = clock::now_ns();
                let wake = match left {
                    Left::Empty => false,
                    Left::Busy => pushed[i],
                    // More due than the stage's share, or a super-frame
                    // stored whole (bulk): the output thread's.
                    Left::Next(release_ns) if release_ns <= now_ns => true,
                    Left::Bulk(_) => true,
                    Left::Next(release_ns) => {
                        let mine = stage_sends(
                            release_ns,
                            now_ns,
                            c.output_wake_ns.load(Ordering::Relaxed),
                            c.output_ready_ns.load(Ordering::Relaxed),
                        );
                        if mine {
                            self.claimed[i] = Some(release_ns);
                        }
                        !mine
                    }
                };
                (wake, sent)
            };
            stage_sent += sent;
            if wake {
                // Pairs with the output stage's fence (see `output::idle`).
                std::sync::atomic::fence(Ordering::SeqCst);
                if c.output_parked.load(Ordering::Acquire) {
                    self.threads[i].unpark();
                }
            } else if sent > 0 && c.output_asleep.load(Ordering::Relaxed) {
                // Its counts now wait for it to publish them (`output::idle`).
                self.threads[i].unpark();
            }
        }
        Ok(stage_sent)
    }

    /// The earliest release the stage took on, if any.
    fn next_claimed_ns(&self) -> Option<u64> {
        self.claimed.iter().flatten().min().copied()
    }
}

/// Counts of one direction, published under its control's lock.
#[derive(Default)]
struct Counts {
    received: u64,
    segmented: u64,
    too_big: u64,
    backpressure: u64,
    /// Stored in the delay line.
    accepted: u64,
    /// Held by the model, not yet decided.
    held: u64,
    /// The model's fates (delivered before backpressure).
    fates: FateCounts,
    kernel_drops: u64,
}

struct Held {
    side: usize,
    arrival_ns: u64,
    frame: Vec<u8>,
}

struct Stage {
    names: [String; 2],
    controls: [Arc<Control>; 2],
    /// Latest release stored in each delay line (see `output::Source`).
    max_stored_ns: [u64; 2],
    /// The earliest release stored since the last turn's end: whether what
    /// the stage took leaves soon enough to be answered while it lingers.
    soonest_stored_ns: Option<u64>,
    producers: [Producer; 2],
    max_frame: [usize; 2],
    /// Per side, whether a received super-frame may cross whole (see the
    /// module doc): its egress sends super-frames with coalescing on, its
    /// port wants no frames back.
    whole_ok: [bool; 2],
    /// The decisions of the wire frames of the super-frame being taken
    /// whole, in order (kept to reuse its allocation).
    whole_decisions: Vec<Decision>,
    /// That super-frame cut, when its wire frames' bytes are needed (for
    /// the tap, or once their decisions differ): the frames back to back,
    /// and where each ends.
    cut_buf: Vec<u8>,
    cut_ends: Vec<usize>,
    c: [Counts; 2],
    wakeups: u64,
    held: HashMap<u64, Held>,
    out: Vec<Decision>,
    next_tag: u64,
    /// The model's time: the latest instant given to it.
    last_ns: u64,
    started_ns: u64,
    /// Whether the model reads [`PacketIn::key`] (else it is not parsed).
    reads_headers: bool,
    shed: [bool; 2],
    pushed: [bool; 2],
    warned_too_big: bool,
    warned_uncut: bool,
    /// The delay-line group of each pipe's packets (see [`super::FlushSet`]):
    /// a pipe deleted by a change has its group flushed; one made again
    /// later gets a new group.
    groups: HashMap<u32, u32>,
    next_group: u32,
    /// When idle instances were last removed by time.
    swept_ns: u64,
    /// Most flow memory charged since the heap was last trimmed.
    flow_peak_bytes: usize,
    tap: Option<Box<dyn Tap>>,
    /// Per side, whether its port takes back frames not sent
    /// ([`RxPort::wants_discards`]), and those frames until the batch ends.
    wants_discards: [bool; 2],
    discards: [Vec<Vec<u8>>; 2],
}

impl Stage {
    /// A record of `side` released at `release_ns` is in its delay line: the
    /// output stage is to be woken, and a release before one already stored is
    /// counted out of order (the output stage then sorts what it takes).
    fn note_stored(&mut self, side: usize, release_ns: u64) {
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

    fn new(
        names: [String; 2],
        controls: [Arc<Control>; 2],
        producers: [Producer; 2],
        max_frame: [usize; 2],
        supers: [bool; 2],
        tap: Option<Box<dyn Tap>>,
    ) -> Stage {
        let started_ns = clock::now_ns();
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
            wakeups: 0,
            held: HashMap::new(),
            out: Vec::new(),
            next_tag: 0,
            last_ns: started_ns,
            started_ns,
            reads_headers: true,
            wants_discards: [false; 2],
            discards: Default::default(),
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
    fn tick(&mut self) -> u64 {
        let now = clock::now_ns().max(self.last_ns);
        self.last_ns = now;
        now
    }

    /// Every [`SWEEP_EVERY_NS`]: removes the model's idle instances, and gives
    /// freed heap back once [`TRIM_AFTER_BYTES`] of flow memory went.
    fn sweep<M: LiveModel>(&mut self, model: &mut M, now_ns: u64) {
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
    fn take_changes<M: LiveModel>(
        &mut self,
        model: &mut M,
        objs: &mut Objects,
        queue: &Mutex<VecDeque<Request>>,
    ) {
        let requests: Vec<Request> = lock(queue).drain(..).collect();
        for (changes, reply) in requests {
            let now = self.tick();
            self.poll(model, objs, now);
            let answer = match changes.iter().try_for_each(|c| model.check(c)) {
                Ok(()) => {
                    self.apply(model, objs, changes, now);
                    Ok(now)
                }
                Err(e) => Err(SubmitError::Refused(e)),
            };
            // The caller may have gone (its connection closed): nothing to tell.
            let _ = reply.try_send(answer);
        }
    }

    /// Applies checked changes at `now_ns`: decisions they force are settled,
    /// deleted pipes' packets flushed.
    fn apply<M: LiveModel>(
        &mut self,
        model: &mut M,
        objs: &mut Objects,
        changes: Vec<Change>,
        now_ns: u64,
    ) {
        if let Some(tap) = self.tap.as_mut() {
            tap.changes(now_ns, &changes);
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
            if let Err(e) = model.apply(now_ns, change, &mut self.out) {
                // Checked before: a model whose check passes a change its
                // apply refuses is in error, which must not stop the bridge.
                debug_assert!(false, "a checked change was refused: {e}");
            }
            let mut out = std::mem::take(&mut self.out);
            for d in out.drain(..) {
                self.settle_held(objs, &d);
            }
            self.out = out;
            // The packets a deleted pipe gave a release time and that have not
            // left yet are flushed, those just settled too.
            let after = model.pipe_numbers();
            for n in before.into_iter().filter(|n| !after.contains(n)) {
                if let Some(g) = self.groups.remove(&n) {
                    for c in &self.controls {
                        c.flush.add(g);
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

    fn group_of(&mut self, pipe: Option<u32>) -> u32 {
        let Some(p) = pipe else { return 0 };
        if let Some(&g) = self.groups.get(&p) {
            return g;
        }
        // Past the largest group, packets are never flushed (counted as
        // delivered at their release time instead).
        if self.next_group >= super::BOUNDED_GROUP {
            return 0;
        }
        let mut g = self.next_group;
        self.next_group += 1;
        if self.controls.iter().any(|c| c.held.bounds(p)) {
            g |= super::BOUNDED_GROUP;
        }
        self.groups.insert(p, g);
        g
    }

    /// One frame received on port `side`: cut it, offer each wire frame.
    #[inline]
    fn take<M: LiveModel>(
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
        let ts = stamp.max(self.last_ns);
        self.last_ns = ts;
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
    fn take_whole<M: LiveModel>(
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
        // The wire frame whose decision differs, and its tag.
        let mut differs = None;
        for i in 0..n {
            let len_bytes = plan.frame_bytes(i) as u32;
            let tag = self.next_tag;
            self.next_tag += 1;
            if let Some(tap) = self.tap.as_mut() {
                tap.frame(side_id, ts, wire_frame(&buf, &ends, i));
            }
            let pkt = PacketIn {
                len_bytes,
                key: whole_key.map_or_else(FlowKey::default, |k| k.of_segment(&plan, i)),
                side: side_id,
                tag,
            };
            model.on_arrival(ts, pkt, &mut self.out);
            let plain = self.out.len() == 1
                && self.out[0].tag == tag
                && plain_as(&self.out[0], decisions.first());
            if !plain {
                differs = Some((i, tag));
                break;
            }
            let d = self.out.pop().expect("one decision, looked at above");
            if let Some(tap) = self.tap.as_mut() {
                tap.decision(ts, len_bytes, &d);
            }
            decisions.push(d);
        }
        match differs {
            None => self.store_whole(objs, &decisions, side, ts, frame.data, plan, offload),
            Some((at, tag)) => {
                // Wire frame `j` as cutting first would have had it: decided
                // plain before `at`, decided (or held) by the arrival of `at`
                // whose decisions wait in `self.out`, not yet arrived after.
                let mut each = |stage: &mut Stage, model: &mut M, j: usize, bytes: &[u8]| {
                    let csum = Csum::Computed;
                    match j.cmp(&at) {
                        std::cmp::Ordering::Less => {
                            stage.settle_untapped(objs, &decisions[j], side, ts, bytes, csum)
                        }
                        std::cmp::Ordering::Equal => {
                            stage.settle_arrival(objs, tag, side, ts, bytes, csum)
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
    fn store_whole(
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
    fn warn(&mut self, side: usize, r: &Cut, frame: &RxFrame<'_>) {
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
    fn admit<M: LiveModel>(
        &mut self,
        model: &mut M,
        objs: &mut Objects,
        side: usize,
        ts: u64,
        bytes: &[u8],
        csum: Csum,
        owner: Option<SocketOwner>,
    ) {
        let tag = self.next_tag;
        self.next_tag += 1;
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
        let pkt = PacketIn {
            len_bytes: bytes.len() as u32,
            key,
            side: side_id,
            tag,
        };
        model.on_arrival(ts, pkt, &mut self.out);
        self.settle_arrival(objs, tag, side, ts, bytes, csum);
    }

    /// Settles the decisions the arrival of packet `tag` (`bytes`) gave:
    /// its own, and those of packets held before; holds it when undecided.
    fn settle_arrival(
        &mut self,
        objs: &mut Objects,
        tag: u64,
        side: usize,
        ts: u64,
        bytes: &[u8],
        csum: Csum,
    ) {
        let mut out = std::mem::take(&mut self.out);
        let mut decided = false;
        for d in out.drain(..) {
            if d.tag == tag {
                decided = true;
                self.settle(objs, &d, side, ts, bytes, csum);
            } else {
                self.settle_held(objs, &d);
            }
        }
        self.out = out;
        if !decided {
            let mut frame = vec![0u8; bytes.len()];
            finish(&mut frame, bytes, csum);
            // Held frames are settled as they came (their checksum is
            // complete now, but not known here to be linkem's).
            self.held.insert(
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

    /// Runs the model's events due by `now_ns` and settles their decisions.
    ///
    /// A poll at t runs the events due at t itself, where an arrival at t
    /// comes before them ([`Model::on_arrival`]). A replay does not see
    /// polls, only arrivals and changes, so an arrival stamped t after a poll
    /// at t would replay before events this run handled first: arrivals after
    /// a poll at t are stamped t + 1 at the earliest.
    fn poll<M: LiveModel>(&mut self, model: &mut M, objs: &mut Objects, now_ns: u64) {
        model.poll(now_ns, &mut self.out);
        self.last_ns = self.last_ns.max(now_ns.saturating_add(1));
        let mut out = std::mem::take(&mut self.out);
        for d in out.drain(..) {
            self.settle_held(objs, &d);
        }
        self.out = out;
    }

    fn settle_held(&mut self, objs: &mut Objects, d: &Decision) {
        let Some(h) = self.held.remove(&d.tag) else {
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
    fn settle(
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
    fn settle_untapped(
        &mut self,
        objs: &mut Objects,
        d: &Decision,
        side: usize,
        arrival_ns: u64,
        bytes: &[u8],
        csum: Csum,
    ) {
        let stored = self.store(d, side, bytes, csum);
        if d.pipe.is_some() || d.queue.is_some() {
            objs.record(d, arrival_ns, bytes.len() as u32, stored);
        }
    }

    /// Counts the decision for its direction; a delivered packet goes into
    /// the delay line. Returns whether it did.
    #[inline]
    fn store(&mut self, d: &Decision, side: usize, bytes: &[u8], csum: Csum) -> bool {
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
    fn discard(&mut self, side: usize, bytes: &[u8]) {
        if self.wants_discards[side] {
            self.discards[side].push(bytes.to_vec());
        }
    }

    fn publish(&self, side: usize) {
        let c = &self.c[side];
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
        shared.segmented = c.segmented;
        // Packets the model holds are in flight as much as those in the line.
        shared.accepted = c.accepted + c.held;
        shared.rx_wakeups = self.wakeups;
        shared.kernel_drops = c.kernel_drops;
    }

    /// Publishes both directions' counts; returns which directions got
    /// packets since the last call (to hand out, [`Outputs::hand_out`]).
    fn publish_all(&mut self) -> [bool; 2] {
        for i in 0..2 {
            self.publish(i);
        }
        std::mem::take(&mut self.pushed)
    }
}

/// One pair's part of the live stage: its model and stage (in `shared`), its
/// directions' controls, its two receive ports and its output side.
struct PairLoop<M> {
    shared: Arc<Shared<M>>,
    controls: [Arc<Control>; 2],
    rx: [Box<dyn RxPort>; 2],
    out: Outputs,
    drops_read_ns: u64,
    /// The pair's link stopped ([`PairLoop::stop_pair`]): its ports are not
    /// read nor polled any more; the stage goes on with the other pairs.
    stopped: bool,
    /// Each receive port's interface was last seen down ([`PortHealth::Down`]):
    /// asked again every [`PortHealth::DOWN_CHECK_NS`] until it is up or gone.
    down: [bool; 2],
}

/// What one pair's turn found.
struct Turn {
    taken: usize,
    /// The earliest release among the frames this turn stored or sent.
    leaving: Option<u64>,
    full: bool,
    next: Option<u64>,
    /// When the model next sweeps its idle flow instances, if it holds any.
    sweep_at: Option<u64>,
    now: u64,
}

impl<M: LiveModel> PairLoop<M> {
    fn new(
        shared: Arc<Shared<M>>,
        controls: [Arc<Control>; 2],
        rx: [Box<dyn RxPort>; 2],
        out: Outputs,
    ) -> Self {
        {
            let mut guard = lock(&shared.core);
            let Core { model, stage } = &mut *guard;
            stage.reads_headers = model.reads_headers();
            stage.wants_discards = rx.each_ref().map(|p| p.wants_discards());
            for side in 0..2 {
                stage.whole_ok[side] &= !stage.wants_discards[side];
            }
        }
        PairLoop {
            shared,
            controls,
            rx,
            out,
            drops_read_ns: 0,
            stopped: false,
            down: [false; 2],
        }
    }

    fn fail(&self, e: String) {
        for c in &self.controls {
            c.fail(e.clone());
        }
    }

    /// Asks each receive port of the pair for its interface's state (after a
    /// socket error, or while it is down), and stops the pair if one is gone.
    fn check_health(&mut self, sides: [bool; 2], wakeups: u64) {
        for (side, asked) in sides.into_iter().enumerate() {
            if !asked || self.stopped {
                continue;
            }
            match self.rx[side].health() {
                PortHealth::Running => self.down[side] = false,
                PortHealth::Down => self.down[side] = true,
                PortHealth::Gone(why) => {
                    self.stop_pair(format!("{why}: the link stopped"), wakeups)
                }
            }
        }
    }

    /// Stops this pair's link for `why` (an interface gone, an I/O error):
    /// the error is recorded for the bridge to report, the last counts
    /// published and the delay lines closed (the output stages send or drop
    /// what they hold, then leave them), change requests answered; the
    /// stage goes on with its other pairs, if any.
    fn stop_pair(&mut self, why: String, wakeups: u64) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        self.fail(why);
        self.finish(wakeups);
        self.shared.stop.store(true, Ordering::Release);
        for (_, reply) in lock(&self.shared.changes).drain(..) {
            let _ = reply.try_send(Err(SubmitError::Stopped));
        }
    }

    /// One batch of the pair: changes, both ports' frames, the model's
    /// events due, counts published.
    // Kept whole: the stage's hot loop, whose steps share the core's lock guard and the batch's `now`.
    fn turn(&mut self, opts: &LiveOptions, wakeups: u64) -> Result<Turn, String> {
        let PairLoop {
            shared,
            controls,
            rx,
            out,
            drops_read_ns,
            stopped: _,
            down: _,
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
        stage.shed = shed;
        let mut taken = 0;
        let mut full = false;
        for (side, port) in rx.iter_mut().enumerate() {
            let n = port
                .rx_batch(batch, &mut |frame| {
                    stage.take(model, &mut objs, side, frame)
                })
                .map_err(|e| format!("receive: {e}"))?;
            taken += n;
            full |= n == batch;
        }
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
        stage.wakeups = wakeups;
        let pushed = stage.publish_all();
        let soonest_stored = stage.soonest_stored_ns.take();
        drop(objs);
        drop(guard);
        let sent = out.hand_out(pushed)?;
        // What the stage sent itself left now.
        let leaving = earliest(soonest_stored, (sent > 0).then_some(now));
        let next = earliest(next, out.next_claimed_ns());
        if shared.wanted.load(Ordering::Relaxed) > 0 {
            std::thread::yield_now();
        }
        Ok(Turn {
            taken,
            leaving,
            full,
            next,
            sweep_at,
            now,
        })
    }

    /// The last counts, and the delay lines closed (the output stages end
    /// once they are empty).
    fn finish(&mut self, wakeups: u64) {
        let mut guard = lock(&self.shared.core);
        let stage = &mut guard.stage;
        for (i, port) in self.rx.iter_mut().enumerate() {
            stage.c[i].kernel_drops = port.rx_kernel_drops();
        }
        stage.wakeups = wakeups;
        stage.publish_all();
        for p in &stage.producers {
            p.close();
        }
        // A parked output thread learns that its line closed.
        for t in &self.out.threads {
            t.unpark();
        }
    }
}

/// The live stage's loop over its pairs (one for `linkem bridge IF_A IF_B`,
/// several for `--pair`) until `stop`: each turn takes a batch of every pair;
/// with nothing taken it sleeps in one poll over every pair's ports and
/// wake-up eventfd, until the earliest of the pairs' next model events.
fn live_stage<M: LiveModel>(
    pairs: &mut [PairLoop<M>],
    stop: &AtomicBool,
    stop_fd: Option<RawFd>,
    opts: &LiveOptions,
    mut realtime: Option<Realtime>,
) {
    // Poll timeouts are the model's event times: no slack on top of them.
    clock::set_timer_slack_ns(1);
    let fail_all = |pairs: &[PairLoop<M>], e: String| {
        for p in pairs {
            p.fail(e.clone());
        }
    };
    let mut fds: Vec<RawFd> = Vec::new();
    let mut wake_fds: Vec<RawFd> = pairs
        .iter()
        .filter_map(|p| p.shared.wake.as_ref().map(AsRawFd::as_raw_fd))
        .collect();
    // Every change and the stop wake the poll: it needs no timeout of its own.
    let woken_by_fds = stop_fd.is_some() && wake_fds.len() == pairs.len();
    if let Some(fd) = stop_fd.filter(|fd| !wake_fds.contains(fd)) {
        wake_fds.push(fd);
    }
    let mut wakeups = 0u64;
    let mut wake = WakeEstimate {
        overshoot_ns: 50_000,
    };
    let mut budget = SpinBudget::new(clock::now_ns());
    let mut linger = Linger::new(opts.linger_ns);
    let mut owners: Vec<(usize, usize)> = Vec::new();
    let mut error_wakes = 0u32;
    let mut down_checked_ns = 0u64;
    'run: while !stop.load(Ordering::Acquire) {
        let mut taken = 0;
        let mut leaving: Option<u64> = None;
        let mut full = false;
        let mut next: Option<u64> = None;
        let mut sweep_at: Option<u64> = None;
        let mut now = 0;
        for p in pairs.iter_mut().filter(|p| !p.stopped) {
            match p.turn(opts, wakeups) {
                Ok(t) => {
                    taken += t.taken;
                    leaving = earliest(leaving, t.leaving);
                    full |= t.full;
                    next = earliest(next, t.next);
                    sweep_at = earliest(sweep_at, t.sweep_at);
                    now = t.now;
                }
                // One pair's failure stops that pair only.
                Err(e) => p.stop_pair(e, wakeups),
            }
        }
        if pairs.iter().all(|p| p.stopped) {
            break 'run;
        }
        if taken > 0 {
            error_wakes = 0;
        }
        if full {
            if let Some(rt) = realtime.as_mut() {
                rt.busy(now);
            }
        }
        let changes = || {
            pairs
                .iter()
                .any(|p| p.shared.has_changes.load(Ordering::Acquire))
        };
        if let Some(release_ns) = leaving {
            linger.leaving(now, release_ns);
        }
        if taken > 0 {
            linger.took(now, &mut budget);
            continue;
        }
        if changes() {
            continue;
        }
        // Sleep until the model's next event less the learnt wake-up overshoot,
        // then go round the loop (taking frames) until it is due: a multi-hop
        // packet's last hop, and a scheduled packet with little delay after
        // its service, are decided at their release time, so a late wake-up
        // would be lateness on the wire.
        let now = clock::now_ns();
        budget.tick(now);
        // An answer to what the stage just sent often arrives within tens of
        // µs: taken while lingering, it costs no wake-up.
        if linger.keep_polling(now, &mut budget) {
            if let Some(rt) = realtime.as_mut() {
                // Failing to leave SCHED_FIFO costs the hosts' time, not packets.
                let _ = rt.linger_mode();
            }
            // Lets a host on this core (the one that answers) run first.
            std::thread::yield_now();
            continue;
        }
        let spin = if budget.frugal {
            MIN_SPIN_NS
        } else {
            wake.spin_ns(opts.spin_ns)
        };
        let mut limit_ns = if woken_by_fds {
            sweep_at.map(|t| t.saturating_sub(now).max(1))
        } else {
            Some(IDLE_WAIT_NS)
        };
        // An interface down is asked again until it is up or gone.
        if any_down(pairs) {
            limit_ns = Some(limit_ns.map_or(PortHealth::DOWN_CHECK_NS, |l| {
                l.min(PortHealth::DOWN_CHECK_NS)
            }));
        }
        let sleep_ns = match next {
            Some(t) if t.saturating_sub(now) <= spin => {
                budget.spun_ns += LOOP_NS;
                std::hint::spin_loop();
                continue;
            }
            Some(t) => Some(limit_ns.map_or(t - now - spin, |l| (t - now - spin).min(l))),
            None => limit_ns,
        };
        if let Some(rt) = realtime.as_mut() {
            // Failing to return to SCHED_FIFO costs precision, not packets.
            let _ = match next {
                Some(_) => rt.wait_mode(),
                None => rt.idle_mode(),
            };
        }
        match wait_all(pairs, &mut fds, &mut owners, &wake_fds, sleep_ns) {
            Ok(waited) => {
                if let (true, Some(_), Some(ns)) = (waited.timed_out, next, sleep_ns) {
                    wake.observe(clock::now_ns().saturating_sub(now + ns));
                }
                for (i, sides) in waited.errored {
                    pairs[i].check_health(sides, wakeups);
                }
                // A socket error that reading did not clear would wake every
                // poll at once: after a few in a row the stage waits between
                // polls instead of spinning.
                if waited.errors {
                    error_wakes += 1;
                    if error_wakes > ERROR_WAKES_BEFORE_PAUSE {
                        std::thread::sleep(std::time::Duration::from_nanos(IDLE_WAIT_NS));
                    }
                } else {
                    error_wakes = 0;
                }
            }
            Err(e) => {
                fail_all(pairs, format!("receive: {e}"));
                break;
            }
        }
        wakeups += 1;
        let now = clock::now_ns();
        if any_down(pairs) && now.wrapping_sub(down_checked_ns) >= PortHealth::DOWN_CHECK_NS {
            down_checked_ns = now;
            for p in pairs.iter_mut() {
                let down = p.down;
                p.check_health(down, wakeups);
            }
        }
    }
    for p in pairs.iter_mut().filter(|p| !p.stopped) {
        p.finish(wakeups);
    }
}

/// Whether a running pair has a receive port whose interface is down.
fn any_down<M>(pairs: &[PairLoop<M>]) -> bool {
    pairs
        .iter()
        .any(|p| !p.stopped && p.down.iter().any(|d| *d))
}

/// Polls that found a socket error ([`RxPort::poll_error`]) in a row, with no
/// frame taken between, after which the stage pauses [`IDLE_WAIT_NS`] between
/// polls rather than spin on an error that does not clear.
const ERROR_WAKES_BEFORE_PAUSE: u32 = 3;

/// What [`wait_all`] found.
struct Waited {
    /// The time passed with nothing ready.
    timed_out: bool,
    /// A socket reported an error.
    errors: bool,
    /// Pairs (by index) with a socket that reported an error, by side: their
    /// ports are asked for their state ([`PairLoop::check_health`]).
    errored: Vec<(usize, [bool; 2])>,
}

/// Whether `d` is a plain decision (delivered, no copy, no corrupt bits, no
/// CE mark) that is the same as `first`'s (release, pipe, queue), when there
/// is a first: the wire frames of a super-frame with such decisions may
/// cross whole.
fn plain_as(d: &Decision, first: Option<&Decision>) -> bool {
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
fn cut_into(buf: &mut Vec<u8>, ends: &mut Vec<usize>, frame: &RxFrame<'_>, max_frame_bytes: usize) {
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
fn wire_frame<'a>(buf: &'a [u8], ends: &[usize], i: usize) -> &'a [u8] {
    let start = if i == 0 {
        0
    } else {
        ends.get(i - 1).copied().unwrap_or(0)
    };
    let end = ends.get(i).copied().unwrap_or(start);
    buf.get(start..end).unwrap_or(&[])
}

/// The earlier of two instants, either of which may be absent.
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Sleeps until a frame may be waiting on one of the running pairs' ports, a
/// change or stop was signalled (one of `wake_fds` readable; it is drained
/// here) or `timeout_ns` passed (None: no timeout). A socket that polls with
/// an error (its interface down or gone) has it read and cleared by its port
/// ([`RxPort::poll_error`]), so the next poll sleeps; a port whose interface
/// is gone names its pair in [`Waited::lost`].
fn wait_all<M: LiveModel>(
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
        if p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) == 0 {
            continue;
        }
        let (i, side) = owners[k];
        waited.errors = true;
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

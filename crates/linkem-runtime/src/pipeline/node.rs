//! The node stage (`linkem bridge --rules`): one thread in place of the two
//! input stages, owning one [`Node`] of ipfw rules and Dummynet pipes for both
//! directions, because a pipe fed from both directions is one shared medium
//! (Dummynet Revisited §3.1) and so cannot be split over two threads.
//!
//! ```text
//!  IF_A ─rx─┐                                                ┌─▶ delay line a->b ─▶ output stage ─tx─▶ IF_B
//!           ├─▶ stamp ─▶ cut ─▶ FlowKey ─▶ Node ─▶ decisions ─┤
//!  IF_B ─rx─┘  (side A / B)                (held until decided) └─▶ delay line b->a ─▶ output stage ─tx─▶ IF_A
//! ```
//!
//! - **Waiting.** One poll(2) over the sockets of both receive ports
//!   ([`RxPort::wait_fds`]), with a timeout up to the node's next event
//!   ([`Node::next_event_ns`]: a scheduler service or a multi-hop reinjection),
//!   so scheduled pipes are served on time with no traffic arriving.
//! - **Arrivals** are stamped as the input stage stamps them (the kernel's
//!   stamp, never before the stage started), and additionally never before the
//!   previous arrival or poll: the node needs non-decreasing time, and frames
//!   of the two ports are taken one port's batch after the other's. Super-frames
//!   are cut and checksums finished as in the input stage ([`super::input::cut`]).
//! - **Decisions** may come at the arrival or later (scheduled pipes, one-pass
//!   off). The bytes of a packet not yet decided are kept, by tag, until its
//!   decision; a delivered packet goes, with its duplicate copy, corrupt bits
//!   and CE mark applied, into the delay line of the direction it was received
//!   for (side A to IF_B). Packets of different pipes are not released in
//!   arrival order, so the output stages run with their reorder heap.
//!
//! - **Events on time.** The stage sleeps until the node's next event less
//!   the wake-up overshoot it has learnt (as the output stage does), then
//!   goes round its loop until the event is due, within the same spin budget.
//!   A packet whose last decision falls on its release time (the final
//!   re-entry of a multi-hop path with `set one-pass off`) still leaves that
//!   late by the output stage's wake-up (tens of µs, shown in the lateness).
//!
//! - **Changes** (`linkem ctl`, [`NodeBridge::update`]; SIGHUP,
//!   [`NodeBridge::reload`]) are applied by the thread that asks for them,
//!   under the lock the stage holds for each batch: so between two batches,
//!   at one instant, and without waking the stage or waiting for it. A change
//!   handed to the stage instead costs two cross-core wake-ups per request
//!   (to the stage, and back with the instant), about 100 µs on this VM,
//!   which bounded a control connection to under 10 000 changes per second.
//!   A change adds no node event before those pending (kept schedulers and
//!   reinjections keep their instants, the rest is decided at the change),
//!   so no event of the stage's current wait is missed. Each packet stored
//!   carries its pipe's group in the delay line; a pipe deleted by a change
//!   has its group flushed, so its packets not yet sent are counted as
//!   `flushed` by the output stage.
//!
//! - **Idle flows** are removed by time, every [`SWEEP_EVERY_NS`] with or
//!   without traffic ([`Node::expire_idle`]); once the memory charged for
//!   flow instances has fallen [`TRIM_AFTER_BYTES`] below its peak since
//!   the last trim, the heap's free pages go back to the system, so the
//!   resident size falls after a flood of flows expires.
//!
//! Counting: each direction keeps the invariant of [`super::DirectionStats`];
//! packets the node holds count as in flight, and the node's own drops
//! (denied, flow-limit, RED and AQM drops) are in [`NodeDrops`].

use super::input::{cut, finish, KERNEL_DROPS_EVERY_NS};
use super::objects::{Objects, ObjectsSnapshot};
use super::output::{output_stage, OutputConfig};
use super::wait::{self, set_realtime, Realtime, SpinBudget, WakeEstimate, MIN_SPIN_NS};
use super::{Control, Direction, DirectionStats};
use crate::clock;
use crate::delay_line::{delay_line, Producer};
use crate::port::{RxFrame, RxPort, TxPort, WaitFds};
use linkem_core::aqm::ecn::mark_ce;
use linkem_core::model::{Change as ModelChange, ChangeError};
use linkem_core::node::{Decision, Node, PacketIn};
use linkem_core::rules::{FlowKey, L2Kind, RuleSet, Side};
use linkem_core::wire::CsumPartial;
use linkem_core::{Fate, FateCounts};
use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{JoinHandle, Thread};

/// Longest wait in poll with nothing due, so the stage notices stop and reloads.
const IDLE_WAIT_NS: u64 = 10_000_000;
/// How often the stage removes idle flow instances without waiting for a
/// packet to their pipe ([`Node::expire_idle`]): an instance goes at most
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

/// What the node stage starts with; per direction `[a->b, b->a]`.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// For messages and stats: the names of the two directions ("a->b", "b->a").
    pub names: [String; 2],
    /// Size of each direction's delay line, as
    /// [`super::DirectionOptions::buffer_bytes`].
    pub buffer_bytes: [usize; 2],
    /// The most the output stages (and the node stage, waiting for the
    /// node's next event) spin before a deadline, as
    /// [`super::DirectionOptions::spin_ns`].
    pub spin_ns: u64,
    /// As [`super::DirectionOptions::max_lag_ns`], for both output stages;
    /// the node stage sheds arrivals of a direction whose output stage is
    /// that far behind.
    pub max_lag_ns: Option<u64>,
    /// Frames taken per receive call from each port, as
    /// [`super::DirectionOptions::batch`].
    pub batch: usize,
    /// As [`super::DirectionOptions::realtime_priority`], for the node stage
    /// (while it waits) and the output stages.
    pub realtime_priority: Option<i32>,
    /// The node stage stays under SCHED_FIFO even when busy.
    pub realtime_input: bool,
}

struct NodeShared {
    stop: AtomicBool,
    /// The node and the state that settles its decisions: held by the stage
    /// for each batch, and by a thread applying a change.
    core: Mutex<Core>,
    /// Per pipe and queue counts ([`super::objects`]); locked after `core`.
    objects: Mutex<Objects>,
    /// Threads waiting for the core's lock: the stage yields after its
    /// batch, so that a busy stage does not keep taking the lock back at once.
    wanted: AtomicUsize,
    /// The output stages, woken when a change stored packets.
    outputs: [Thread; 2],
}

struct Core {
    node: Node,
    stage: Stage,
}

/// A change applied between two packets.
enum Change<'a> {
    /// SIGHUP: a new node; the old one's held packets are decided first.
    Replace(Box<Node>),
    /// `linkem ctl`: the rule set changed ([`Node::update`]).
    Update(Box<RuleSet>),
    /// `linkem ctl`: typed changes ([`Node::change`]), and where their result goes.
    Submit(Vec<ModelChange>, &'a mut Result<(), ChangeError>),
}

/// A running bridge of two directions through one node.
pub struct NodeBridge {
    directions: Vec<Direction>,
    shared: Arc<NodeShared>,
    thread: Option<JoinHandle<()>>,
}

impl NodeBridge {
    /// Starts the node stage and the two output stages. `rx[0]`/`tx[0]`:
    /// IF_A's receive half and IF_B's send half (direction a->b, side A).
    // Kept whole: the start sequence; the node thread takes what setting up the output stages left.
    pub fn start(
        opts: NodeOptions,
        node: Node,
        rx: [Box<dyn RxPort>; 2],
        tx: [Box<dyn TxPort>; 2],
    ) -> Result<NodeBridge, String> {
        let mut directions = Vec::new();
        let mut producers = Vec::new();
        let mut max_frame = [0usize; 2];
        for (i, tx) in tx.into_iter().enumerate() {
            let (producer, consumer) = delay_line(opts.buffer_bytes[i])?;
            let control = Arc::new(Control::new(
                producer.uses_huge_pages(),
                producer.capacity_bytes(),
            ));
            max_frame[i] = tx.max_frame_bytes();
            let cfg = OutputConfig {
                spin_ns: opts.spin_ns,
                max_lag_ns: opts.max_lag_ns,
                // Packets of different pipes leave out of arrival order;
                // the stage counts the records it stores out of order.
                reorders: true,
                sorted_runs: true,
            };
            let prio = opts.realtime_priority;
            let out = {
                let control = control.clone();
                std::thread::Builder::new()
                    .name(format!("linkem-out-{}", opts.names[i]))
                    .spawn(move || {
                        let mut realtime = prio.map(wait::Realtime::new);
                        if let Some(Err(e)) = realtime.as_mut().map(wait::Realtime::wait_mode) {
                            control.fail(format!("output stage: {e}"));
                        }
                        output_stage(control, consumer, tx, cfg, realtime)
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
        let stage = Stage::new(opts.names.clone(), controls.clone(), producers, max_frame);
        let shared = Arc::new(NodeShared {
            stop: AtomicBool::new(false),
            core: Mutex::new(Core { node, stage }),
            objects: Mutex::new(Objects::default()),
            wanted: AtomicUsize::new(0),
            outputs,
        });
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("linkem-node".into())
                .spawn(move || {
                    let mut realtime = None;
                    match (opts.realtime_priority, opts.realtime_input) {
                        (Some(p), true) => {
                            if let Err(e) = set_realtime(p) {
                                for c in &controls {
                                    c.fail(format!("node stage: {e}"));
                                }
                            }
                        }
                        (Some(p), false) => realtime = Some(Realtime::new(p)),
                        (None, _) => {}
                    }
                    node_stage(shared, controls, opts, rx, realtime)
                })
                .map_err(|e| format!("cannot start the node thread: {e}"))?
        };
        Ok(NodeBridge {
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
    /// gives them, the node's own drops among each one's fates.
    pub fn stats(&self) -> Vec<DirectionStats> {
        self.directions.iter().map(Direction::stats).collect()
    }

    /// An I/O error that stopped a stage, if any.
    pub fn error(&self) -> Option<String> {
        self.directions.iter().find_map(Direction::error)
    }

    /// Looks at the node (its pipes, rules and counters) under its lock: the
    /// node stage waits meanwhile, so keep `f` short while traffic flows.
    pub fn with_node<R>(&self, f: impl FnOnce(&Node) -> R) -> R {
        f(&self.lock_core().node)
    }

    /// The core's lock, taken between two of the stage's batches.
    fn lock_core(&self) -> MutexGuard<'_, Core> {
        self.shared.wanted.fetch_add(1, Ordering::Relaxed);
        let guard = lock(&self.shared.core);
        self.shared.wanted.fetch_sub(1, Ordering::Relaxed);
        guard
    }

    /// Each pipe's and queue's counts by fate, packets in it now and time
    /// spent in it (see `ObjectStats`), by number.
    pub fn object_stats(&self) -> ObjectsSnapshot {
        lock(&self.shared.objects).snapshot(clock::now_ns())
    }

    /// Replaces the node between two batches. Packets the old node holds
    /// are decided first, as if no further packet arrived there (their
    /// release times stand); then every new packet goes through `node`.
    /// Returns the instant of the change, None if the stage has stopped.
    pub fn reload(&self, node: Node) -> Option<u64> {
        self.apply(Change::Replace(Box::new(node)))
    }

    /// Applies a changed rule set between two batches ([`Node::update`]:
    /// reconfigured pipes keep their queued packets and release times,
    /// unchanged schedulers their held packets; the packets the change
    /// decides are settled at once, a deleted pipe's flushed), and
    /// returns the instant (the stage's clock, CLOCK_REALTIME ns) from which
    /// it applies; it has applied when this returns. Changes apply in the
    /// order they are made. None if the stage has stopped.
    pub fn update(&self, set: RuleSet) -> Option<u64> {
        self.apply(Change::Update(Box::new(set)))
    }

    /// Applies typed changes between two batches, all at one instant and in
    /// order ([`Node::change`]: in place where it can, else as
    /// [`NodeBridge::update`]), and returns that instant; a deleted pipe's
    /// packets not yet sent are flushed. The caller checked the changes
    /// against the running set: a change the node refuses stops the list
    /// there (those before it stay applied) and is returned.
    pub fn submit(&self, changes: Vec<ModelChange>) -> Result<u64, ChangeError> {
        let mut result = Ok(());
        let at = self.apply(Change::Submit(changes, &mut result));
        result?;
        at.ok_or(ChangeError::Stopped)
    }

    fn apply(&self, change: Change<'_>) -> Option<u64> {
        if self.shared.stop.load(Ordering::Acquire) {
            return None;
        }
        let mut guard = self.lock_core();
        let Core { node, stage } = &mut *guard;
        let mut objs = lock(&self.shared.objects);
        stage.pushed = [false; 2];
        let now = clock::now_ns().max(stage.last_ns);
        stage.last_ns = now;
        match change {
            Change::Replace(new) => {
                stage.poll(node, &mut objs, u64::MAX);
                let pipes: Vec<u32> = new.pipes().iter().map(|p| p.def.number).collect();
                objs.retain(|p| pipes.contains(&p), |_| true);
                *node = *new;
            }
            Change::Submit(changes, result) => {
                let before = node.next_event_ns();
                *result = stage.submit(node, &mut objs, changes, now);
                debug_assert!(
                    node.next_event_ns()
                        .is_none_or(|t| before.is_some_and(|b| t >= b)),
                    "a change made a node event earlier than the stage's wait"
                );
            }
            Change::Update(set) => {
                let before = node.next_event_ns();
                stage.update(node, &mut objs, *set, now);
                // The stage may be asleep until `before`: nothing may fall due sooner.
                debug_assert!(
                    node.next_event_ns()
                        .is_none_or(|t| before.is_some_and(|b| t >= b)),
                    "a change made a node event earlier than the stage's wait"
                );
            }
        }
        for (i, c) in stage.controls.iter().enumerate() {
            stage.publish(i, c);
        }
        let pushed = stage.pushed;
        drop(objs);
        drop(guard);
        wake_outputs(&self.shared.outputs, &self.directions_controls(), pushed);
        Some(now)
    }

    fn directions_controls(&self) -> [&Control; 2] {
        [&self.directions[0].control, &self.directions[1].control]
    }

    /// Stops the node stage, then the output stages (packets still in the
    /// delay lines are not sent); returns the final counts. The node stays
    /// readable with [`NodeBridge::with_node`].
    pub fn stop(&mut self) -> Vec<DirectionStats> {
        self.halt();
        self.directions.drain(..).map(Direction::stop).collect()
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for NodeBridge {
    fn drop(&mut self) {
        self.halt();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Wakes the output stages of the directions that got packets, if parked.
fn wake_outputs(outputs: &[Thread; 2], controls: &[&Control; 2], pushed: [bool; 2]) {
    for i in 0..2 {
        if pushed[i] {
            // Pairs with the output stage's fence (see `output::idle`).
            std::sync::atomic::fence(Ordering::SeqCst);
            if controls[i].output_parked.load(Ordering::Acquire) {
                outputs[i].unpark();
            }
        }
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
    /// Held by the node, not yet decided.
    held: u64,
    /// The node's fates (delivered before backpressure).
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
    producers: [Producer; 2],
    max_frame: [usize; 2],
    c: [Counts; 2],
    wakeups: u64,
    held: HashMap<u64, Held>,
    out: Vec<Decision>,
    next_tag: u64,
    /// The node's time: the latest arrival or poll.
    last_ns: u64,
    started_ns: u64,
    shed: [bool; 2],
    pushed: [bool; 2],
    warned_too_big: bool,
    warned_uncut: bool,
    /// The delay-line group of each pipe's packets (see [`super::FlushSet`]):
    /// a pipe deleted by an update has its group flushed; one made again
    /// later gets a new group.
    groups: HashMap<u32, u32>,
    next_group: u32,
    /// When idle instances were last removed by time.
    swept_ns: u64,
    /// Most flow memory charged since the heap was last trimmed.
    flow_peak_bytes: usize,
}

impl Stage {
    fn new(
        names: [String; 2],
        controls: [Arc<Control>; 2],
        producers: [Producer; 2],
        max_frame: [usize; 2],
    ) -> Stage {
        let started_ns = clock::now_ns();
        Stage {
            names,
            controls,
            max_stored_ns: [0; 2],
            producers,
            max_frame,
            c: Default::default(),
            wakeups: 0,
            held: HashMap::new(),
            out: Vec::new(),
            next_tag: 0,
            last_ns: started_ns,
            started_ns,
            shed: [false; 2],
            pushed: [false; 2],
            warned_too_big: false,
            warned_uncut: false,
            groups: HashMap::new(),
            next_group: 1,
            swept_ns: started_ns,
            flow_peak_bytes: 0,
        }
    }

    /// Every [`SWEEP_EVERY_NS`]: removes the node's idle instances, and gives
    /// freed heap back once [`TRIM_AFTER_BYTES`] of flow memory went.
    fn sweep(&mut self, node: &mut Node, now_ns: u64) {
        self.flow_peak_bytes = self.flow_peak_bytes.max(node.flow_memory_bytes());
        if now_ns.saturating_sub(self.swept_ns) < SWEEP_EVERY_NS {
            return;
        }
        self.swept_ns = now_ns;
        node.expire_idle(now_ns);
        let now_bytes = node.flow_memory_bytes();
        if self.flow_peak_bytes.saturating_sub(now_bytes) >= TRIM_AFTER_BYTES {
            crate::mem::release_free_memory();
            self.flow_peak_bytes = now_bytes;
        }
    }

    /// Applies a changed rule set at `now_ns` (see [`NodeBridge::update`]).
    fn update(&mut self, node: &mut Node, objs: &mut Objects, set: RuleSet, now_ns: u64) {
        let gone: Vec<u32> = node
            .pipes()
            .iter()
            .map(|p| p.def.number)
            .filter(|n| !set.pipes.contains_key(n))
            .collect();
        let pipes: Vec<u32> = set.pipes.keys().copied().collect();
        let queues: Vec<u32> = set.sched.queues.keys().copied().collect();
        // Packets of kept schedulers and between hops stay held; those the
        // change decides (a changed or deleted scheduler's, a reinjection
        // that cannot go on) are settled now, into their pipe's group.
        node.update(set, now_ns, &mut self.out);
        let mut out = std::mem::take(&mut self.out);
        for d in out.drain(..) {
            self.settle_held(objs, &d);
        }
        self.out = out;
        // The packets a deleted pipe gave a release time and that have not
        // left yet are flushed, those just settled too.
        for n in gone {
            if let Some(g) = self.groups.remove(&n) {
                for c in &self.controls {
                    c.flush.add(g);
                }
            }
        }
        objs.retain(
            |p| pipes.binary_search(&p).is_ok(),
            |q| queues.binary_search(&q).is_ok(),
        );
    }

    /// Applies typed changes at `now_ns` (see [`NodeBridge::submit`]), with
    /// [`Stage::update`]'s handling of settled packets and deleted pipes.
    fn submit(
        &mut self,
        node: &mut Node,
        objs: &mut Objects,
        changes: Vec<ModelChange>,
        now_ns: u64,
    ) -> Result<(), ChangeError> {
        let before: Vec<u32> = node.pipes().iter().map(|p| p.def.number).collect();
        let mut result = Ok(());
        for c in changes {
            result = node.change(c, now_ns, &mut self.out);
            if result.is_err() {
                break;
            }
        }
        let mut out = std::mem::take(&mut self.out);
        for d in out.drain(..) {
            self.settle_held(objs, &d);
        }
        self.out = out;
        let pipes: Vec<u32> = node.pipes().iter().map(|p| p.def.number).collect();
        if pipes != before {
            for n in before.iter().filter(|n| pipes.binary_search(n).is_err()) {
                if let Some(g) = self.groups.remove(n) {
                    for c in &self.controls {
                        c.flush.add(g);
                    }
                }
            }
        }
        let queues = &node.sched_words().queues;
        objs.retain(
            |p| pipes.binary_search(&p).is_ok(),
            |q| queues.contains_key(&q),
        );
        result
    }

    fn group_of(&mut self, pipe: Option<u32>) -> u32 {
        let Some(p) = pipe else { return 0 };
        if let Some(&g) = self.groups.get(&p) {
            return g;
        }
        // Past the largest group, packets are never flushed (counted as
        // delivered at their release time instead).
        if self.next_group > crate::delay_line::MAX_GROUP {
            return 0;
        }
        let g = self.next_group;
        self.next_group += 1;
        self.groups.insert(p, g);
        g
    }

    /// One frame received on port `side`: cut it, offer each wire frame.
    fn take(&mut self, node: &mut Node, objs: &mut Objects, side: usize, frame: RxFrame<'_>) {
        self.c[side].received += 1;
        let stamp = if frame.ts_ns != 0 {
            frame.ts_ns.max(self.started_ns)
        } else {
            clock::now_ns()
        };
        let ts = stamp.max(self.last_ns);
        self.last_ns = ts;
        let max = self.max_frame[side];
        let r = cut(&frame, max, &mut |bytes, csum| {
            self.admit(node, objs, side, ts, bytes, csum)
        });
        self.c[side].segmented += r.segmented();
        if let (Some(e), false) = (&r.uncut, self.warned_uncut) {
            self.warned_uncut = true;
            eprintln!(
                "linkem: {}: a super-frame the sender left to segment could not be cut ({e}) \
                 (warned once; turn segmentation offload off on the sending host for such \
                 traffic: ethtool -K DEV tso off gso off)",
                self.names[side]
            );
        }
        if r.too_big {
            self.c[side].too_big += 1;
            if !self.warned_too_big {
                self.warned_too_big = true;
                eprintln!(
                    "linkem: {}: a frame of {} bytes is larger than the egress interface sends \
                     ({max} bytes with its Ethernet header); such frames are dropped and counted \
                     as too-big (raise the egress MTU to carry them)",
                    self.names[side],
                    frame.orig_len.max(frame.data.len() as u32)
                );
            }
        }
    }

    /// One wire frame into the node; its decision (now or when it comes).
    fn admit(
        &mut self,
        node: &mut Node,
        objs: &mut Objects,
        side: usize,
        ts: u64,
        bytes: &[u8],
        csum: Option<CsumPartial>,
    ) {
        let tag = self.next_tag;
        self.next_tag += 1;
        let pkt = PacketIn {
            len_bytes: bytes.len() as u32,
            key: FlowKey::parse(bytes, L2Kind::Ethernet),
            side: if side == 0 { Side::A } else { Side::B },
            tag,
        };
        node.on_arrival(ts, pkt, &mut self.out);
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

    /// Runs the node's events due by `now_ns` and settles their decisions.
    fn poll(&mut self, node: &mut Node, objs: &mut Objects, now_ns: u64) {
        node.poll(now_ns, &mut self.out);
        let mut out = std::mem::take(&mut self.out);
        for d in out.drain(..) {
            self.settle_held(objs, &d);
        }
        self.out = out;
    }

    fn settle_held(&mut self, objs: &mut Objects, d: &Decision) {
        let Some(h) = self.held.remove(&d.tag) else {
            // Every packet is held until decided; a decision without one is
            // the node's error, which must not stop the bridge.
            debug_assert!(false, "a decision for packet {} never held", d.tag);
            return;
        };
        self.c[h.side].held -= 1;
        self.settle(objs, d, h.side, h.arrival_ns, &h.frame, None);
    }

    /// Applies a decision to a frame received on `side`.
    fn settle(
        &mut self,
        objs: &mut Objects,
        d: &Decision,
        side: usize,
        arrival_ns: u64,
        bytes: &[u8],
        csum: Option<CsumPartial>,
    ) {
        let stored = self.store(d, side, bytes, csum);
        objs.record(d, arrival_ns, bytes.len() as u32, stored);
    }

    /// Counts the decision for its direction; a delivered packet goes into
    /// the delay line. Returns whether it did.
    fn store(
        &mut self,
        d: &Decision,
        side: usize,
        bytes: &[u8],
        csum: Option<CsumPartial>,
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
                return false;
            }
        }
        c.fates.add(Fate::Delivered);
        c.fates.duplicated += d.duplicate as u64;
        c.fates.corrupted += !d.corrupt_bits.is_empty() as u64;
        if self.shed[side] {
            c.backpressure += 1;
            return false;
        }
        let stored =
            self.producers[side].push_with_group(d.release_ns, bytes.len(), false, group, |slot| {
                finish(slot, bytes, csum);
                if d.ce {
                    let _ = mark_ce(slot, false);
                }
                for bit in &d.corrupt_bits {
                    if let Some(b) = slot.get_mut((bit / 8) as usize) {
                        *b ^= 0x80 >> (bit % 8);
                    }
                }
            });
        if !stored {
            c.backpressure += 1;
            return false;
        }
        c.accepted += 1;
        self.pushed[side] = true;
        if d.release_ns >= self.max_stored_ns[side] {
            self.max_stored_ns[side] = d.release_ns;
        } else {
            // Release: the record is in the line before the output stage sees the count.
            self.controls[side]
                .out_of_order
                .fetch_add(1, Ordering::Release);
        }
        if d.duplicate {
            // The copy leaves as it came, right after the original; one that
            // finds no room is not a lost packet.
            let _ = self.producers[side].push_with_group(
                d.release_ns,
                bytes.len(),
                true,
                group,
                |slot| finish(slot, bytes, csum),
            );
        }
        true
    }

    fn publish(&self, side: usize, control: &Control) {
        let c = &self.c[side];
        let mut counts = c.fates;
        counts.set(
            Fate::Delivered,
            counts.get(Fate::Delivered).saturating_sub(c.backpressure),
        );
        counts.set(Fate::Backpressure, c.backpressure);
        counts.set(Fate::TooBig, c.too_big);
        let mut shared = control.input.lock().expect("the lock holders never panic");
        shared.counts = counts;
        shared.received = c.received;
        shared.segmented = c.segmented;
        // Packets the node holds are in flight as much as those in the line.
        shared.accepted = c.accepted + c.held;
        shared.rx_wakeups = self.wakeups;
        shared.kernel_drops = c.kernel_drops;
    }
}

// Kept whole: the stage's hot loop, whose steps share the core's lock guard and the batch's `now`.
fn node_stage(
    shared: Arc<NodeShared>,
    controls: [Arc<Control>; 2],
    opts: NodeOptions,
    mut rx: [Box<dyn RxPort>; 2],
    mut realtime: Option<Realtime>,
) {
    // Poll timeouts are the node's event times: no slack on top of them.
    clock::set_timer_slack_ns(1);
    let fail = |e: String| {
        for c in &controls {
            c.fail(e.clone());
        }
    };
    let control_refs = [&*controls[0], &*controls[1]];
    let batch = opts.batch.max(1);
    let mut fds: Vec<RawFd> = Vec::new();
    let mut drops_read_ns = 0u64;
    let mut wakeups = 0u64;
    let mut wake = WakeEstimate {
        overshoot_ns: 50_000,
    };
    let mut budget = SpinBudget::new(clock::now_ns());
    'run: while !shared.stop.load(Ordering::Acquire) {
        let now = clock::now_ns();
        // As the input stage: while an output stage is more than max-lag
        // behind, its direction stores nothing (counted backpressure).
        let shed = controls.each_ref().map(|c| {
            let behind_ns = now.saturating_sub(c.output_at_ns.load(Ordering::Relaxed));
            opts.max_lag_ns.is_some_and(|m| behind_ns > m)
        });
        let mut guard = lock(&shared.core);
        let Core { node, stage } = &mut *guard;
        let mut objs = lock(&shared.objects);
        stage.shed = shed;
        stage.pushed = [false; 2];
        let mut taken = 0;
        let mut full = false;
        for (side, port) in rx.iter_mut().enumerate() {
            match port.rx_batch(batch, &mut |frame| stage.take(node, &mut objs, side, frame)) {
                Ok(n) => {
                    taken += n;
                    full |= n == batch;
                }
                Err(e) => {
                    fail(format!("receive: {e}"));
                    break 'run;
                }
            }
        }
        let now = clock::now_ns().max(stage.last_ns);
        stage.last_ns = now;
        stage.poll(node, &mut objs, now);
        stage.sweep(node, now);
        let next = node.next_event_ns();
        if now.wrapping_sub(drops_read_ns) > KERNEL_DROPS_EVERY_NS {
            drops_read_ns = now;
            for (i, port) in rx.iter_mut().enumerate() {
                stage.c[i].kernel_drops = port.rx_kernel_drops();
            }
        }
        stage.wakeups = wakeups;
        for (i, c) in controls.iter().enumerate() {
            stage.publish(i, c);
        }
        let pushed = stage.pushed;
        drop(objs);
        drop(guard);
        if shared.wanted.load(Ordering::Relaxed) > 0 {
            std::thread::yield_now();
        }
        wake_outputs(&shared.outputs, &control_refs, pushed);
        if full {
            if let Some(rt) = realtime.as_mut() {
                rt.busy(now);
            }
        }
        if taken > 0 {
            continue;
        }
        // Sleep until the node's next event less the learnt wake-up overshoot,
        // then go round the loop (taking frames) until it is due: a multi-hop
        // packet's last hop, and a scheduled packet with little delay after
        // its service, are decided at their release time, so a late wake-up
        // would be lateness on the wire.
        let now = clock::now_ns();
        budget.tick(now);
        let spin = if budget.frugal {
            MIN_SPIN_NS
        } else {
            wake.spin_ns(opts.spin_ns)
        };
        let sleep_ns = match next {
            Some(t) if t.saturating_sub(now) <= spin => {
                budget.spun_ns += LOOP_NS;
                std::hint::spin_loop();
                continue;
            }
            Some(t) => (t - now - spin).min(IDLE_WAIT_NS),
            None => IDLE_WAIT_NS,
        };
        if let Some(rt) = realtime.as_mut() {
            // Failing to return to SCHED_FIFO costs precision, not packets.
            let _ = rt.wait_mode();
        }
        match wait_both(&mut rx, &mut fds, sleep_ns) {
            Ok(timed_out) => {
                if timed_out && next.is_some() {
                    wake.observe(clock::now_ns().saturating_sub(now + sleep_ns));
                }
            }
            Err(e) => {
                fail(format!("receive: {e}"));
                break;
            }
        }
        wakeups += 1;
    }
    let mut guard = lock(&shared.core);
    let stage = &mut guard.stage;
    for (i, port) in rx.iter_mut().enumerate() {
        stage.c[i].kernel_drops = port.rx_kernel_drops();
    }
    stage.wakeups = wakeups;
    for (i, c) in controls.iter().enumerate() {
        stage.publish(i, c);
    }
    for p in &stage.producers {
        p.close();
    }
}

/// Sleeps until a frame may be waiting on either port or `timeout_ns` passed.
/// Returns true when the time passed with nothing ready.
fn wait_both(
    rx: &mut [Box<dyn RxPort>; 2],
    fds: &mut Vec<RawFd>,
    timeout_ns: u64,
) -> io::Result<bool> {
    fds.clear();
    let mut unsupported = false;
    for port in rx.iter_mut() {
        match port.wait_fds(fds)? {
            WaitFds::Ready => return Ok(false),
            WaitFds::Added => {}
            WaitFds::Unsupported => unsupported = true,
        }
    }
    if unsupported {
        let turn = (timeout_ns / 2).clamp(1, TURN_NS);
        for port in rx.iter_mut() {
            port.wait_rx(turn)?;
        }
        return Ok(false);
    }
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // Safety: pfds and ts are valid for the call; no signal mask is given.
    let r = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
        return Ok(false);
    }
    Ok(r == 0)
}

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
//!   frames that left recently). Through a hold on sparse traffic (a frame
//!   stored for a release within the stage's horizon, when a credit growing
//!   at the spin budget's share of the time pays for it) it stays awake
//!   too, in the policy it woke in, and sends the frame itself: one wake-up
//!   per frame instead of the arrival's and the release's. For a flow whose
//!   arrivals keep a beat ([`cadence`]: a ping, a keep-alive) it wakes
//!   shortly before the window the next frame is expected in and polls
//!   through it, from the same credit, so the frame does not wait for the
//!   stage's wake-up (`rx_on_beat`). A
//!   ping's answer needs none of this (it comes back inside the stage's
//!   send, the receiving host's kernel path running in the send call on
//!   veth); a host process's answer (a UDP or TCP server) comes 50-100 µs
//!   later, after its own wake-up.
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
//!   other, and at t + 1 at the earliest after a poll at t ([`Driver`]: the
//!   rules every driver keeps, replay's too). That clamped `t` is what the
//!   model, the events and the recording see ([`Tap`]), so a replay of the
//!   recording sees the same inputs.
//! - **Decisions** may come at the arrival or later (scheduled pipes, one-pass
//!   off). The bytes of a packet not yet decided are kept by the driver, by
//!   tag, until its decision; a delivered packet goes, with its duplicate copy, corrupt bits
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
//!   batches the stage takes `now`, runs `poll(now)`
//!   ([`Driver::begin_changes`]), checks every change of
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
//! once per batch, with the model's delays of what the batch stored (each
//! recorded into the direction's histogram then: no wake-up of their own).
use super::objects::{Objects, ObjectsSnapshot};
use super::output::{
    output_stage, who_sends, Left, Outlet, OutputConfig, Sender, STAGE_HORIZON_NS,
};
use super::output_group::output_group;
use super::wait::{self, set_realtime, Linger, Realtime, SpinBudget, WakeEstimate, MIN_SPIN_NS};
use super::waker::Waker;
use super::wire::{cut, finish, whole_plan, Csum, Cut, KERNEL_DROPS_EVERY_NS};
use super::{Control, Direction, DirectionStats};
use crate::clock;
use crate::delay_line::{delay_line, delay_line_with, Producer, Whole, LAZY_FIRST_RESIDENT_BYTES};
use crate::port::{PortHealth, RxFrame, RxPort, TxPort, WaitFds};
use linkem_core::driver::{ChangeInstant, Driver, Frame};
use linkem_core::model::{Change, ChangeError, LinkModel, Model};
use linkem_core::node::{Decision, Node};
use linkem_core::rules::{FlowKey, L2Kind, Side, SocketOwner};
use linkem_core::wire::{segment, Offload, SegmentPlan};
use linkem_core::{Fate, FateCounts};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

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

mod api;
mod bridge;
mod cadence;
mod kernel;
mod outputs;
mod run;
mod settle;
mod stage;
mod take;

pub use api::{LiveModel, LiveOptions, SubmitError, Tap};
use bridge::*;
pub use bridge::{GroupPair, LiveBridge, LiveGroup, NodeBridge, Submitted};
use cadence::Beats;
use kernel::*;
use outputs::*;
use run::*;
use stage::*;

/// The earlier of two instants, either of which may be absent.
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

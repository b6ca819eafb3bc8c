//! The node: rules in front of many pipes (Dummynet's model, Dummynet Revisited §3).
//!
//! # Per packet
//! 1. The rules run from the first ([`crate::rules::classify`]).
//! 2. `deny` drops (`denied`), `allow` or no matching rule passes unimpaired
//!    (released at the arrival), `pipe N` sends the packet through pipe N's
//!    instance for its flow ([`crate::pipe`]): the instance's [`crate::Link`]
//!    gives the fate and the release time, closed-form, at arrival.
//! 3. With one-pass on (the default) that is the packet's fate. With one-pass
//!    off, a delivered packet re-enters the rules at its release time r, at the
//!    rule after the one that sent it, and may take further pipes: the next
//!    hop's arrival is exactly r.
//!
//! # Time order
//! A hop's arrival at r must be fed to the next pipe in time order with every
//! other arrival there, or a pipe would see its arrivals out of order. The node
//! keeps reinjections in a [`ReleaseQueue`] by (r, push order) and runs those due before
//! each new arrival ([`Node::on_arrival`] at t runs every reinjection with
//! r ≤ t first) and on [`Node::poll`]; [`Node::next_event_ns`] says when the
//! next is due. Without one-pass off the heap stays empty and every decision is
//! returned at arrival.
//!
//! # Release order across pipes
//! Decisions carry their release time; the driver merges them into one output
//! order by (release, decision order). Replay keeps one [`ReleaseQueue`] over
//! the packets in flight: O(log P) per packet for P packets in flight, independent of the
//! number of pipes (100 000 active pipes cost what one busy pipe with the same
//! packets in flight costs), and exact whatever the pipes do. A heap of
//! per-pipe FIFOs (O(log active pipes)) needs each pipe's releases to be
//! monotone, which `reorder allow`, netem's `reorder` and duplicates break. No
//! pipe's state is touched by another pipe's packets, so nothing about one pipe
//! delays another; only the output interface serialises them (Dummynet Revisited §4.1.1).
//!
//! # Idle flow instances
//! A masked pipe's or scheduler's instance idle for longer than the hold
//! ([`NodeConfig::idle_hold_ns`]) is removed at the first arrival to its pipe
//! after that ([`crate::pipe`]), and by a sweep over every pipe at each
//! multiple k·S of [`EXPIRY_SWEEP_NS`] = S of model time: the first input at
//! or after k·S (an arrival, a poll, a change), and every event the node runs
//! at or after k·S, comes after the sweep `expire(k·S)`, which itself comes
//! after every event due before k·S. The sweep gives back the flow budget
//! (`--max-flows`, `--max-flow-memory`) of flows that stopped while no packet
//! comes to their pipe, so it changes decisions (a flow-limit drop, or not);
//! being a function of model time, not of when a driver happens to run, a
//! live run and its replay sweep at the same instants and decide the same.
//! When an input crosses several multiples, one sweep at the last does what
//! one per multiple would: nothing happens between them.
//!
//! # Duplicates and corruption on multi-hop paths
//! A copy made by `duplicate` on a hop travels with the original (released
//! right after it at the end of the path); corrupted bits from every hop are
//! listed.

use crate::fate::Fate;
use crate::order::ReleaseQueue;
use crate::pipe::{FlowBudget, Pipe, PipeVerdict};
use crate::rules::classify::{Classifier, Hit};
use crate::rules::flow::FlowKey;
use crate::rules::parse::RuleSet;
use crate::rules::Side;
use crate::sched::words::SchedSet;
use std::collections::HashMap;

mod update;

/// Model time between two sweeps of idle flow instances (100 ms): see the
/// [module doc](self).
pub const EXPIRY_SWEEP_NS: u64 = 100_000_000;

/// A packet offered to the node.
#[derive(Debug, Clone, Copy)]
pub struct PacketIn {
    /// Frame length in bytes as on the wire without overhead (pcap's
    /// `orig_len`): what the pipes' rates, byte limits and byte counters
    /// charge.
    pub len_bytes: u32,
    /// The header fields the rules and the pipes' masks read
    /// ([`FlowKey::parse`] of the frame).
    pub key: FlowKey,
    /// The interface the packet was received on (`in`/`out`, `recv`, `xmit`).
    pub side: Side,
    /// The caller's handle for the packet, returned in the decision.
    pub tag: u64,
}

/// The node's decision for one packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The [`PacketIn::tag`] of the packet this decision is for.
    pub tag: u64,
    /// Delivered (through every pipe on its path, or unimpaired: `allow`, or
    /// no rule took it), or why it was dropped: by a pipe's link
    /// (`queue-full`, `loss`, `policed`), a `deny` rule, the flow limits, or a
    /// queue's AQM.
    pub fate: Fate,
    /// The interface the packet was received on ([`PacketIn::side`]); it
    /// leaves by the other one.
    pub side: Side,
    /// Packets in the last pipe's link queue when the packet arrived there (0
    /// under a scheduler, whose queues come before the link).
    pub queue_packets: u32,
    /// Frame bytes in that queue then.
    pub queue_bytes: u64,
    /// Delivered: when it leaves; dropped: when the drop happened.
    pub release_ns: u64,
    /// Some hop's `duplicate` made a copy: a second copy leaves right after
    /// this one at `release_ns`.
    pub duplicate: bool,
    /// Bits to flip in the frame, one per hop that corrupted it, numbered as
    /// [`crate::Verdict::corrupt_bit`] (bit 0 = most significant bit of byte 0).
    pub corrupt_bits: Vec<u32>,
    /// Number of the last rule that acted on the packet (None: no rule matched).
    pub rule: Option<u32>,
    /// Last pipe the packet went through, and its flow id there.
    pub pipe: Option<u32>,
    /// The flow id of the packet's instance in that pipe
    /// ([`crate::pipe::MaskedKey::flow_id`]; 0 in a pipe without a mask).
    pub flow_id: u64,
    /// Pipes traversed.
    pub hops: u32,
    /// Queue (under a scheduler) the packet last went through.
    pub queue: Option<u32>,
    /// An AQM marked the packet CE (set it on the frame: [`crate::aqm::ecn::mark_ce`]).
    pub ce: bool,
}

impl Decision {
    /// A packet's decision before any rule or pipe: delivered at `release_ns`, never
    /// queued, as `allow` or no matching rule leaves it.
    pub(crate) fn delivered(tag: u64, side: Side, release_ns: u64) -> Decision {
        Decision {
            tag,
            fate: Fate::Delivered,
            side,
            queue_packets: 0,
            queue_bytes: 0,
            release_ns,
            duplicate: false,
            corrupt_bits: Vec::new(),
            rule: None,
            pipe: None,
            flow_id: 0,
            hops: 0,
            queue: None,
            ce: false,
        }
    }
}

/// The node's settings beyond the rule file.
#[derive(Debug, Clone, Copy)]
pub struct NodeConfig {
    /// The user seed: every pipe instance ([`crate::pipe::instance_seed`]),
    /// the rules' `prob` draws and the schedulers derive their random streams
    /// from it, so a run repeats exactly.
    pub seed: u64,
    /// `--max-flows`: most live dynamic instances over all pipes; a packet
    /// that would need one more is dropped as [`Fate::FlowLimit`]
    /// (default [`crate::pipe::DEFAULT_MAX_FLOWS`]).
    pub max_flows: usize,
    /// `--max-flow-memory`: most bytes charged for dynamic instances and
    /// scheduler classes ([`crate::pipe::FlowBudget::max_bytes`]); a packet
    /// that would need more is dropped as [`Fate::FlowLimit`] (default
    /// [`crate::pipe::DEFAULT_MAX_FLOW_BYTES`]).
    pub max_flow_bytes: usize,
    /// How long, in ns, an instance stays after it went idle before it is
    /// removed ([`crate::pipe::FlowBudget::idle_hold_ns`]; default 1 s).
    pub idle_hold_ns: u64,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            seed: 0,
            max_flows: crate::pipe::DEFAULT_MAX_FLOWS,
            max_flow_bytes: crate::pipe::DEFAULT_MAX_FLOW_BYTES,
            idle_hold_ns: crate::pipe::DEFAULT_IDLE_HOLD_NS,
        }
    }
}

#[derive(Debug)]
struct InFlight {
    pkt: PacketIn,
    next_rule: usize,
    d: Decision,
}

/// Rules and pipes: packets and time in, decisions out.
#[derive(Debug)]
pub struct Node {
    classifier: Classifier,
    pipes: Vec<Pipe>,
    /// Index into `pipes` by pipe number (pipe numbers are at most 65535).
    pipe_at: Vec<u32>,
    one_pass: bool,
    budget: FlowBudget,
    reinject: ReleaseQueue<InFlight>,
    /// Packets waiting in a scheduled pipe, by the tag handed to the scheduler.
    in_flight: HashMap<u64, InFlight>,
    /// Next tag for a scheduled packet (arrival order).
    seq: u64,
    /// Packets passed unimpaired because no rule took them.
    pub unmatched: u64,
    /// Pipes served by a scheduler ([`crate::sched::service`]).
    pub sched: crate::sched::service::NodeSched,
    /// The scheduler, queue and pipe scheduler words the node was built
    /// from, for changes ([`Node::rule_set`]).
    sched_words: SchedSet,
    cfg: NodeConfig,
    /// The next multiple of [`EXPIRY_SWEEP_NS`] not swept yet.
    next_sweep_ns: u64,
    /// The latest instant of an input (arrival, poll, change).
    clock_ns: u64,
    /// The node's start ([`Node::start`]), if it was given one.
    start_ns: Option<u64>,
}

impl Node {
    /// Builds the node for a parsed rule file: the compiled rules, one
    /// [`Pipe`] per configured pipe and the schedulers, all seeded from
    /// `cfg.seed`; one-pass as the file set it.
    pub fn new(set: RuleSet, cfg: NodeConfig) -> Node {
        let mut pipes = Vec::new();
        let top = set.pipes.keys().next_back().map_or(0, |&n| n as usize);
        let mut pipe_at = vec![u32::MAX; top + 1];
        let defs: Vec<&crate::pipe::PipeDef> = set.pipes.values().collect();
        let sched = crate::sched::service::NodeSched::new(&set.sched, &defs, cfg.seed);
        let sched_words = set.sched;
        for (n, def) in set.pipes {
            pipe_at[n as usize] = pipes.len() as u32;
            pipes.push(Pipe::new(def, cfg.seed));
        }
        Node {
            classifier: Classifier::new(set.rules, cfg.seed),
            pipes,
            pipe_at,
            one_pass: set.one_pass,
            budget: FlowBudget {
                live: 0,
                max: cfg.max_flows,
                bytes: 0,
                max_bytes: cfg.max_flow_bytes,
                idle_hold_ns: cfg.idle_hold_ns,
            },
            reinject: ReleaseQueue::new(),
            in_flight: HashMap::new(),
            seq: 0,
            unmatched: 0,
            sched,
            sched_words,
            cfg,
            next_sweep_ns: 0,
            clock_ns: 0,
            start_ns: None,
        }
    }

    /// The node starts at `t0_ns`, a live run's start (which its recording
    /// stores): every pipe's trace and schedule count from there, in all its
    /// instances (masked ones made later included), as a single link's do
    /// live; a pipe a change makes later starts at that change. Without it
    /// (the replay of a capture) each instance starts them at its first
    /// packet. Called before any input.
    pub fn start(&mut self, t0_ns: u64) {
        self.start_ns.get_or_insert(t0_ns);
        self.start_pipes(t0_ns);
    }

    /// Starts at `t0_ns` the pipes not started yet (all of them at the
    /// node's start, the ones a change made later).
    fn start_pipes(&mut self, t0_ns: u64) {
        for p in &mut self.pipes {
            p.start(t0_ns);
        }
        self.sched.start(t0_ns);
    }

    /// The rule set the node runs, as typed definitions: what a change is
    /// checked against and, for a change not made in place, edited and
    /// handed to [`Node::update`].
    pub fn rule_set(&self) -> RuleSet {
        RuleSet {
            pipes: self
                .pipes
                .iter()
                .map(|p| (p.def.number, (*p.def).clone()))
                .collect(),
            rules: self.classifier.rules().to_vec(),
            one_pass: self.one_pass,
            sched: self.sched_words.clone(),
        }
    }

    /// The scheduler, queue and pipe scheduler words of the running set.
    pub fn sched_words(&self) -> &SchedSet {
        &self.sched_words
    }

    /// Whether pipe `n` exists.
    fn pipe_index(&self, n: u32) -> Option<usize> {
        match self.pipe_at.get(n as usize) {
            Some(&i) if i != u32::MAX => Some(i as usize),
            _ => None,
        }
    }

    /// Notes an input at `now_ns`, after sweeping the idle instances at the
    /// multiples of [`EXPIRY_SWEEP_NS`] it crosses.
    #[inline]
    fn input_at(&mut self, now_ns: u64) {
        self.sweep_to(now_ns);
        self.clock_ns = self.clock_ns.max(now_ns);
    }

    /// Sweeps at the last multiple of [`EXPIRY_SWEEP_NS`] at or before `t_ns`
    /// if it was not swept yet.
    #[inline]
    fn sweep_to(&mut self, t_ns: u64) {
        if t_ns >= self.next_sweep_ns {
            self.sweep(t_ns);
        }
    }

    #[cold]
    fn sweep(&mut self, t_ns: u64) {
        let at_ns = t_ns - t_ns % EXPIRY_SWEEP_NS;
        self.next_sweep_ns = at_ns.saturating_add(EXPIRY_SWEEP_NS);
        for p in self.pipes.iter_mut().filter(|p| p.def.mask.is_some()) {
            p.expire(at_ns, &mut self.budget);
        }
        self.sched.expire_idle(at_ns, &mut self.budget);
    }

    /// Whether a packet waits in the node for a later decision: a multi-hop
    /// reinjection, or a packet in a scheduled pipe.
    pub fn holds_packets(&self) -> bool {
        !self.reinject.is_empty() || !self.in_flight.is_empty()
    }

    /// The compiled rules, with each rule's packet and byte counters.
    pub fn classifier(&self) -> &Classifier {
        &self.classifier
    }

    /// The pipes in increasing pipe number, with their instances and counters.
    pub fn pipes(&self) -> &[Pipe] {
        &self.pipes
    }

    /// Whether the first pipe's verdict is the packet's fate (the default);
    /// false after `set one-pass off`, when a delivered packet re-enters the
    /// rules at its release time.
    pub fn one_pass(&self) -> bool {
        self.one_pass
    }

    /// Live dynamic instances over all pipes.
    pub fn live_flows(&self) -> usize {
        self.budget.live
    }

    /// Bytes charged for the live dynamic instances and scheduler classes
    /// (bounded by `--max-flow-memory`, [`crate::pipe::FlowBudget`]).
    pub fn flow_memory_bytes(&self) -> usize {
        self.budget.bytes
    }

    /// Sweeps the idle instances as the next input at `now_ns` would (at the
    /// last multiple of [`EXPIRY_SWEEP_NS`] at or before it, if not swept
    /// yet), so that a driver frees the flows that stopped while no packet
    /// comes. Idempotent with the node's own sweep: a call changes nothing an
    /// input at or after `now_ns` would not have done first. With an event due
    /// before `now_ns` it does nothing, since the sweep would come before that
    /// event, out of time order: poll ([`Node::poll`]) instead. Decides no
    /// packet.
    pub fn expire_idle(&mut self, now_ns: u64) {
        if self.next_event_ns().is_none_or(|t| t >= now_ns) {
            self.input_at(now_ns);
        }
    }

    /// When the next reinjection or scheduler service is due, if any.
    pub fn next_event_ns(&mut self) -> Option<u64> {
        let r = self.reinject.peek_release_ns();
        match (r, self.sched.next_event_ns()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs the reinjections and scheduler services due at or before `now_ns`.
    pub fn poll(&mut self, now_ns: u64, out: &mut Vec<Decision>) {
        self.advance(now_ns, true, out);
        self.input_at(now_ns);
    }

    /// Runs due events in time order: reinjections (arrivals) at t before
    /// services at t; services at `now_ns` itself only when `services_at_now`
    /// (an arrival at now comes first).
    fn advance(&mut self, now_ns: u64, services_at_now: bool, out: &mut Vec<Decision>) {
        loop {
            let r = self.reinject.peek_release_ns();
            let s = self.sched.next_event_ns();
            match (r, s) {
                (Some(at), _) if at <= now_ns && s.is_none_or(|s| at <= s) => {
                    self.sweep_to(at);
                    let (at, f) = self.reinject.pop().expect("peeked");
                    self.run(at, f.pkt, f.next_rule, f.d, out);
                }
                (_, Some(t)) if t < now_ns || (services_at_now && t == now_ns) => {
                    self.sweep_to(t);
                    self.sched.poll_one(t);
                    self.finish_departures(out);
                }
                _ => break,
            }
        }
    }

    /// A packet handed to a scheduled pipe (`queue`: None for the pipe's own queue).
    #[allow(clippy::too_many_arguments)]
    fn sched_arrive(
        &mut self,
        t: u64,
        idx: usize,
        queue: Option<u32>,
        pkt: PacketIn,
        next_rule: usize,
        d: Decision,
        out: &mut Vec<Decision>,
    ) {
        let seq = self.seq;
        self.seq += 1;
        self.sched.arrive(
            idx,
            queue,
            t,
            seq,
            pkt.len_bytes,
            &pkt.key,
            &mut self.budget,
        );
        self.in_flight.insert(seq, InFlight { pkt, next_rule, d });
        self.finish_departures(out);
    }

    /// Turns the scheduled pipes' decisions into the node's.
    fn finish_departures(&mut self, out: &mut Vec<Decision>) {
        use crate::sched::service::Outcome;
        let deps = std::mem::take(&mut self.sched.deps);
        for dep in &deps {
            let f = self
                .in_flight
                .remove(&dep.tag)
                .expect("one entry per scheduled packet");
            let mut d = f.d;
            d.flow_id = dep.flow_id;
            d.queue = Some(dep.queue);
            d.ce |= dep.ce;
            match dep.outcome {
                Outcome::FlowLimit => {
                    d.release_ns = dep.at_ns;
                    d.fate = Fate::FlowLimit;
                }
                Outcome::Dropped(c) => {
                    d.release_ns = dep.at_ns;
                    d.fate = c.into();
                }
                Outcome::Link {
                    fate,
                    release_ns,
                    duplicate,
                    corrupt_bit,
                } => {
                    d.release_ns = release_ns;
                    d.duplicate |= duplicate;
                    if let Some(b) = corrupt_bit {
                        d.corrupt_bits.push(b);
                    }
                    if fate.is_drop() {
                        d.fate = fate;
                    } else if !self.one_pass {
                        let next = InFlight {
                            pkt: f.pkt,
                            next_rule: f.next_rule,
                            d,
                        };
                        self.reinject.push(release_ns, next);
                        continue;
                    }
                }
            }
            out.push(d);
        }
        let mut deps = deps;
        deps.clear();
        self.sched.deps = deps;
    }

    /// A packet arriving at `now_ns` (non-decreasing between calls). Decisions
    /// made now (this packet's, unless it continues to another hop later, and
    /// those of reinjections due by now) are appended to `out`.
    #[inline]
    pub fn on_arrival(&mut self, now_ns: u64, pkt: PacketIn, out: &mut Vec<Decision>) {
        if !self.reinject.is_empty() || self.sched.next_event_ns().is_some() {
            self.advance(now_ns, false, out);
        }
        self.input_at(now_ns);
        let d = Decision::delivered(pkt.tag, pkt.side, now_ns);
        self.run(now_ns, pkt, 0, d, out);
    }

    #[inline]
    fn run(
        &mut self,
        t: u64,
        pkt: PacketIn,
        start: usize,
        mut d: Decision,
        out: &mut Vec<Decision>,
    ) {
        let hit = self
            .classifier
            .classify(&pkt.key, pkt.side, pkt.len_bytes, start);
        let rule_no = |c: &Classifier, i: usize| Some(c.rules()[i].number);
        match hit {
            Hit::NoMatch => {
                if d.hops == 0 {
                    self.unmatched += 1;
                }
                d.release_ns = t;
            }
            Hit::Allow { rule } => {
                d.rule = rule_no(&self.classifier, rule);
                d.release_ns = t;
            }
            Hit::Deny { rule } => {
                d.rule = rule_no(&self.classifier, rule);
                d.fate = Fate::Denied;
                d.release_ns = t;
            }
            Hit::Queue { rule, queue } => {
                d.rule = rule_no(&self.classifier, rule);
                let idx = self
                    .sched
                    .queue_pipe(queue)
                    .expect("the parser checked every queue's pipe");
                d.pipe = Some(self.pipes[idx].def.number);
                d.hops += 1;
                return self.sched_arrive(t, idx, Some(queue), pkt, rule + 1, d, out);
            }
            Hit::Pipe { rule, pipe }
                if self
                    .sched
                    .is_scheduled(self.pipe_at[pipe as usize] as usize) =>
            {
                d.rule = rule_no(&self.classifier, rule);
                d.pipe = Some(pipe);
                d.hops += 1;
                return self.sched_arrive(
                    t,
                    self.pipe_at[pipe as usize] as usize,
                    None,
                    pkt,
                    rule + 1,
                    d,
                    out,
                );
            }
            Hit::Pipe { rule, pipe } => {
                d.rule = rule_no(&self.classifier, rule);
                d.pipe = Some(pipe);
                d.hops += 1;
                let p = &mut self.pipes[self.pipe_at[pipe as usize] as usize];
                match p.arrive(t, pkt.len_bytes, &pkt.key, &mut self.budget) {
                    PipeVerdict::FlowLimit => {
                        d.fate = Fate::FlowLimit;
                        d.release_ns = t;
                    }
                    PipeVerdict::Link {
                        verdict: v,
                        flow_id,
                    } => {
                        d.flow_id = flow_id;
                        d.release_ns = v.release_ns;
                        d.queue_packets = v.queue_packets;
                        d.queue_bytes = v.queue_bytes;
                        d.duplicate |= v.duplicate;
                        if let Some(b) = v.corrupt_bit {
                            d.corrupt_bits.push(b);
                        }
                        if v.fate.is_drop() {
                            d.fate = v.fate;
                        } else if !self.one_pass {
                            let next = InFlight {
                                pkt,
                                next_rule: rule + 1,
                                d,
                            };
                            self.reinject.push(v.release_ns, next);
                            return;
                        }
                    }
                }
            }
        }
        out.push(d);
    }
}

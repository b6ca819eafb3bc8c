//! A pipe's scheduler instances, one per masked flow ([`SchedPipe`]), and every
//! scheduled pipe of a node ([`NodeSched`]), each instance a [`SchedLink`].

use super::{sched_class_bytes, sched_instance_bytes, Departure, Outcome, QueueBinding, SchedLink};
use crate::config::LinkConfig;
use crate::pipe::table::{FlowTable, MapIndex};
use crate::pipe::{FlowBudget, FlowMask, MaskedKey};
use crate::rules::flow::FlowKey;
use crate::sched::{QueueParams, SchedParams};
use std::collections::HashMap;

/// Bitwise OR of two masks (Dummynet's `flow_id_or`): a queue's instances
/// under a masked scheduler are per (queue mask | scheduler mask).
fn mask_or(a: FlowMask, b: FlowMask) -> FlowMask {
    FlowMask {
        proto: a.proto | b.proto,
        src_ip4: a.src_ip4 | b.src_ip4,
        dst_ip4: a.dst_ip4 | b.dst_ip4,
        src_ip6: a.src_ip6 | b.src_ip6,
        dst_ip6: a.dst_ip6 | b.dst_ip6,
        src_port: a.src_port | b.src_port,
        dst_port: a.dst_port | b.dst_port,
        flow_label: a.flow_label | b.flow_label,
    }
}

/// What a new scheduler instance of a pipe is made from.
#[derive(Debug, Clone)]
struct Template {
    params: SchedParams,
    link: LinkConfig,
    burst_bytes: u64,
    /// The queues with their masks ORed with the scheduler mask, no class yet.
    queues: Vec<QueueBinding>,
    seed: u64,
    /// The origin of the link's trace and schedule in every instance
    /// ([`SchedPipe::start`]); None: each instance's first packet.
    origin_ns: Option<u64>,
}

/// A scheduled pipe: one [`SchedLink`] (scheduler instance with its own
/// copy of the pipe's link) per scheduler-masked flow id, or one for all
/// traffic without a scheduler mask.
///
/// As Dummynet's `sched N config ... mask` (`sch->sched_mask`,
/// `find_sch_inst`): a packet's flow id ANDed with the scheduler mask picks
/// its instance, made at its first packet and seeded by
/// [`crate::pipe::instance_seed`] (seed, pipe, flow id, creation time) as a
/// dynamic pipe instance is; inside it the queue's own mask ORed with the
/// scheduler mask picks the class. An instance with nothing queued, nothing
/// on the wire and every packet released at `idle_at` is removed at the
/// first arrival to its pipe after `idle_at + hold`
/// ([`crate::pipe::FlowBudget::idle_hold_ns`]); instances count against the
/// node's `--max-flows` and `--max-flow-memory` ([`crate::pipe::FlowBudget`]).
/// The instances live in a [`FlowTable`], as a masked pipe's do: its module
/// doc ([`crate::pipe::table`]) states the slots, index, expiry heap
/// (O(log n) amortised per arrival), compaction and charges. Expiry also runs
/// by time ([`NodeSched::expire_idle`]).
/// An fq_* instance makes a flow's class at the flow's first packet (not
/// all `flows` at the start, as Dummynet's `fq_codel_new_sched` does): an
/// instance costs [`sched_instance_bytes`] plus [`sched_class_bytes`] per
/// flow that has had a packet, whatever `flows` says.
#[derive(Debug)]
pub struct SchedPipe {
    /// The pipe number.
    pub pipe: u32,
    /// The scheduler mask; None: one instance, made with the pipe.
    pub mask: Option<FlowMask>,
    tpl: Template,
    /// Without a mask: the one instance, in slot 0.
    single: Option<SchedLink>,
    /// With a mask: the instances.
    flows: FlowTable<SchedLink, MapIndex>,
    /// Instances removed when idle.
    pub expired: u64,
    /// Packets refused because the node's [`FlowBudget`] was full.
    pub flow_limit_drops: u64,
}

impl SchedPipe {
    /// A scheduled pipe. Without `mask` its one instance exists from the
    /// start, seeded as the pipe's single instance (flow 0, created at 0).
    pub fn new(
        pipe: u32,
        params: SchedParams,
        link: LinkConfig,
        seed: u64,
        burst_bytes: u64,
        mut queues: Vec<QueueBinding>,
        mask: Option<FlowMask>,
    ) -> Self {
        if let Some(sm) = mask {
            for q in &mut queues {
                q.mask = Some(q.mask.map_or(sm, |m| mask_or(m, sm)));
            }
        }
        let tpl = Template {
            params,
            link,
            burst_bytes,
            queues,
            seed,
            origin_ns: None,
        };
        let mut sp = SchedPipe {
            pipe,
            mask,
            tpl,
            single: None,
            // With room for its first packet's class too: an instance admitted
            // whose first class is refused would hold memory for no packet.
            flows: FlowTable::new(sched_instance_bytes(), sched_class_bytes()),
            expired: 0,
            flow_limit_drops: 0,
        };
        if mask.is_none() {
            sp.single = Some(sp.make(MaskedKey::default(), 0));
        }
        sp
    }

    fn make(&self, key: MaskedKey, now: u64) -> SchedLink {
        Self::make_with(&self.tpl, self.pipe, self.mask.is_some(), key, now)
    }

    fn make_with(t: &Template, pipe: u32, masked: bool, key: MaskedKey, now: u64) -> SchedLink {
        let flow_id = if masked { key.flow_id() } else { 0 };
        let seed = crate::pipe::instance_seed(t.seed, pipe, flow_id, now);
        let mut l = SchedLink::new(
            pipe,
            t.params.clone(),
            t.link.clone(),
            seed,
            t.burst_bytes,
            t.queues.clone(),
        );
        l.key = key;
        l.flow_id = flow_id;
        l.idle_at_ns = now;
        if let Some(t0) = t.origin_ns {
            l.link.start_at(t0);
        }
        l
    }

    /// As [`crate::pipe::Pipe::start`]: the link's trace and schedule count
    /// from `t0_ns` in every instance, made now or later.
    pub fn start(&mut self, t0_ns: u64) {
        let t0 = *self.tpl.origin_ns.get_or_insert(t0_ns);
        if let Some(l) = &mut self.single {
            l.link.start_at(t0);
        }
    }

    /// The live instances (slot, instance), in slot order.
    pub fn instances(&self) -> impl Iterator<Item = (u32, &SchedLink)> {
        self.single.iter().map(|l| (0, l)).chain(self.flows.iter())
    }

    /// Live instances of a pipe with a scheduler mask (0 without one).
    pub fn active_instances(&self) -> usize {
        self.flows.len()
    }

    /// Bytes charged to the node's [`FlowBudget`] for this pipe: its
    /// instances and the classes made in them.
    pub fn charged_bytes(&self) -> usize {
        self.flows.charged_bytes() + self.single.as_ref().map_or(0, |l| l.charged_bytes)
    }

    /// The instance in `slot`.
    #[inline]
    pub fn slot(&self, slot: u32) -> Option<&SchedLink> {
        match &self.single {
            Some(l) => (slot == 0).then_some(l),
            None => self.flows.get(slot),
        }
    }

    #[inline]
    fn slot_mut(&mut self, slot: u32) -> Option<&mut SchedLink> {
        match &mut self.single {
            Some(l) => (slot == 0).then_some(l),
            None => self.flows.get_mut(slot),
        }
    }

    /// The slot of the instance for `key` at `now`, made if new; None when
    /// the node's `budget` admits no more.
    fn instance_for(
        &mut self,
        now: u64,
        key: &FlowKey,
        budget: &mut crate::pipe::FlowBudget,
    ) -> Option<u32> {
        let Some(mask) = self.mask else {
            return Some(0);
        };
        let mk = mask.apply(key);
        let (tpl, pipe) = (&self.tpl, self.pipe);
        let made = self.flows.get_or_insert(&mk, now, budget, || {
            Self::make_with(tpl, pipe, true, mk, now)
        });
        match made {
            Some((s, _)) => Some(s),
            None => {
                self.flow_limit_drops += 1;
                None
            }
        }
    }

    /// Whether `new`, this pipe as a changed rule set makes it, has the same
    /// scheduler: type and parameters, scheduler mask, and the same queues
    /// (numbers, parameters with the pipe's own queue's limit and AQM, masks),
    /// so that every class, counter and queued packet means the same under
    /// it. The link words (rate, delay, impairments, burst) may differ
    /// ([`SchedPipe::take_link`]).
    pub fn same_scheduler(&self, new: &SchedPipe) -> bool {
        let (a, b) = (&self.tpl, &new.tpl);
        self.pipe == new.pipe
            && self.mask == new.mask
            && a.seed == b.seed
            && a.params == b.params
            && a.queues.len() == b.queues.len()
            && a.queues
                .iter()
                .zip(&b.queues)
                .all(|(x, y)| x.number == y.number && x.mask == y.mask && *x.params == *y.params)
    }

    /// Takes `new`'s link words from `now_ns` on, as
    /// [`crate::pipe::Pipe::reconfigure`] does for a closed-form pipe: each
    /// instance's link is reconfigured ([`Link::reconfigure`]), so its
    /// busy-until time t_L, the packet on the wire and the queued packets
    /// stay, and packets served from now on take the new parameters;
    /// instances made later are made with them. Nothing changes when the
    /// words are the same.
    pub fn take_link(&mut self, new: &SchedPipe, now_ns: u64) {
        if self.tpl.link == new.tpl.link && self.tpl.burst_bytes == new.tpl.burst_bytes {
            return;
        }
        let old = &self.tpl.link;
        if old.trace != new.tpl.link.trace || old.schedule != new.tpl.link.schedule {
            // A new trace or schedule starts at the change (as in the pipe).
            self.tpl.origin_ns = self.tpl.origin_ns.map(|_| now_ns);
        }
        self.tpl.link = new.tpl.link.clone();
        self.tpl.burst_bytes = new.tpl.burst_bytes;
        // As `SchedLink::new`: the queues, not the link, hold the packets.
        let mut cfg = new.tpl.link.clone();
        cfg.queue_packets = None;
        cfg.queue_bytes = None;
        for l in self.single.iter_mut().chain(self.flows.values_mut()) {
            l.link.reconfigure(now_ns, cfg.clone());
            l.link.set_burst(new.tpl.burst_bytes);
        }
    }

    /// Decides every packet this pipe holds as if nothing more arrived: each
    /// instance is served at its service instants, in time order, until
    /// nothing is queued or on the wire. Decisions go to `out` (dequeue
    /// instants and release times may lie after the present).
    pub fn drain(&mut self, out: &mut Vec<Departure>) {
        use std::cmp::Reverse;
        let mut due: std::collections::BinaryHeap<Reverse<(u64, u32)>> = self
            .instances()
            .filter_map(|(s, l)| l.next_event_ns().map(|t| Reverse((t, s))))
            .collect();
        while let Some(Reverse((t, s))) = due.pop() {
            let l = self.slot_mut(s).expect("a live slot");
            l.poll(t, out);
            if let Some(n) = l.next_event_ns() {
                due.push(Reverse((n, s)));
            }
        }
        debug_assert!(self.instances().all(|(_, l)| l.queued() == 0));
    }

    /// Removes the instances idle for longer than the hold at `now`, giving
    /// their count and bytes back to `budget` ([`FlowTable::expire`]).
    /// Returns whether slots moved: the caller's service events name slots.
    fn expire(&mut self, now: u64, budget: &mut FlowBudget) -> bool {
        let done = self.flows.expire(now, budget, drop);
        self.expired += done.removed;
        done.compacted
    }
}

/// The scheduled pipes of a node and their service instants.
#[derive(Debug, Default)]
pub struct NodeSched {
    /// By the node's pipe index; None: the pipe keeps the closed-form link.
    pub links: Vec<Option<SchedPipe>>,
    /// Queue number → pipe index.
    queue_pipe: HashMap<u32, usize>,
    /// (service instant, pipe index, instance slot); an entry is stale when
    /// the instance's `next_event_ns` no longer equals it (or it expired:
    /// a slot reused later has only later events).
    events: std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize, u32)>>,
    /// Decisions of the last calls to [`NodeSched::arrive`] and
    /// [`NodeSched::poll_one`], in decision order; the caller drains it.
    pub deps: Vec<Departure>,
}

impl NodeSched {
    /// Builds the scheduled pipes. `pipes` are the node's pipe definitions in
    /// its index order.
    pub fn new(
        set: &crate::sched::words::SchedSet,
        pipes: &[&crate::pipe::PipeDef],
        seed: u64,
    ) -> NodeSched {
        let mut ns = NodeSched::default();
        for (idx, def) in pipes.iter().enumerate() {
            let n = def.number;
            if !set.scheduled(n) {
                ns.links.push(None);
                continue;
            }
            let own = QueueParams {
                limit_packets: def.link.queue_packets,
                limit_bytes: def.link.queue_bytes,
                aqm: set
                    .pipes
                    .get(&n)
                    .and_then(|p| p.aqm)
                    .unwrap_or(crate::aqm::AqmConfig::DropTail),
                ..Default::default()
            };
            let sched_mask = set.sched_mask(n, def.mask);
            // The pipe's mask is the scheduler's (Dummynet's `pipe N config
            // mask` sets sched N's mask): the pipe's own queue has none.
            let mut queues = vec![QueueBinding::new(0, own, None)];
            queues[0].number = n;
            for q in set.queues.values().filter(|q| q.parent.pipe() == n) {
                queues.push(QueueBinding::new(q.number, q.params.clone(), q.mask));
                ns.queue_pipe.insert(q.number, idx);
            }
            ns.links.push(Some(SchedPipe::new(
                n,
                set.params(n),
                def.link.clone(),
                seed,
                def.burst_bytes,
                queues,
                sched_mask,
            )));
        }
        ns
    }

    /// Carries the scheduled pipes of `old`, the node's before a change at
    /// `now_ns`, into `self`, built for the changed rule set: a pipe whose
    /// number stays scheduled with the same scheduler
    /// ([`SchedPipe::same_scheduler`]) is kept whole (instances, queued
    /// packets, counters, t_L, service instants) at its new index, its link
    /// words taken from the new set ([`SchedPipe::take_link`]); every other
    /// pipe of `old` (changed, no longer scheduled, or deleted) is drained
    /// ([`SchedPipe::drain`]), in pipe order, its decisions in `self.deps`.
    /// The event heap is rebuilt for the new indexes, so no entry names a
    /// pipe by an index that moved.
    pub fn carry_over(&mut self, old: NodeSched, now_ns: u64) {
        let mut by_number: std::collections::BTreeMap<u32, SchedPipe> = old
            .links
            .into_iter()
            .flatten()
            .map(|p| (p.pipe, p))
            .collect();
        for (idx, slot) in self.links.iter_mut().enumerate() {
            let Some(new) = slot.as_ref() else { continue };
            let Some(mut kept) = by_number.remove(&new.pipe) else {
                continue;
            };
            if !kept.same_scheduler(new) {
                by_number.insert(kept.pipe, kept);
                continue;
            }
            kept.take_link(new, now_ns);
            for (s, l) in kept.instances() {
                if let Some(t) = l.next_event_ns() {
                    self.events.push(std::cmp::Reverse((t, idx, s)));
                }
            }
            *slot = Some(kept);
        }
        for p in by_number.values_mut() {
            p.drain(&mut self.deps);
        }
    }

    /// Every scheduled pipe's link starts at `t0_ns` ([`SchedPipe::start`]).
    pub fn start(&mut self, t0_ns: u64) {
        for p in self.links.iter_mut().flatten() {
            p.start(t0_ns);
        }
    }

    /// Pipe `pipe_idx` (node index) is served by a scheduler, not the
    /// closed-form link.
    #[inline]
    pub fn is_scheduled(&self, pipe_idx: usize) -> bool {
        self.links.get(pipe_idx).is_some_and(|l| l.is_some())
    }

    /// The pipe index serving queue `n`.
    pub fn queue_pipe(&self, n: u32) -> Option<usize> {
        self.queue_pipe.get(&n).copied()
    }

    /// Every live scheduler instance of every scheduled pipe, by pipe index
    /// then slot.
    pub fn instances(&self) -> impl Iterator<Item = &SchedLink> {
        self.links
            .iter()
            .flatten()
            .flat_map(|p| p.instances().map(|(_, l)| l))
    }

    /// Live scheduler instances of masked schedulers over all pipes.
    pub fn active_instances(&self) -> usize {
        self.links
            .iter()
            .flatten()
            .map(|p| p.active_instances())
            .sum()
    }

    /// Bytes charged to the node's [`FlowBudget`] by every scheduled pipe.
    pub fn charged_bytes(&self) -> usize {
        self.links.iter().flatten().map(|p| p.charged_bytes()).sum()
    }

    /// Removes, in every masked scheduled pipe, the instances idle for longer
    /// than the hold at `now` (without waiting for an arrival at the pipe).
    pub fn expire_idle(&mut self, now: u64, budget: &mut FlowBudget) {
        for idx in 0..self.links.len() {
            self.expire_pipe(idx, now, budget);
        }
    }

    fn expire_pipe(&mut self, idx: usize, now: u64, budget: &mut FlowBudget) {
        let Some(p) = self.links[idx].as_mut().filter(|p| p.mask.is_some()) else {
            return;
        };
        if !p.expire(now, budget) {
            return;
        }
        // Slots moved: file the pipe's service instants under its new slots.
        let mut events = std::mem::take(&mut self.events).into_vec();
        events.retain(|std::cmp::Reverse((_, i, _))| *i != idx);
        for (s, l) in p.instances() {
            if let Some(t) = l.next_event_ns() {
                events.push(std::cmp::Reverse((t, idx, s)));
            }
        }
        self.events = std::collections::BinaryHeap::from(events);
    }

    /// Earliest service instant over all scheduled pipes.
    #[inline]
    pub fn next_event_ns(&mut self) -> Option<u64> {
        while let Some(&std::cmp::Reverse((t, i, slot))) = self.events.peek() {
            let due = self.links[i]
                .as_ref()
                .and_then(|p| p.slot(slot))
                .and_then(|l| l.next_event_ns());
            if due == Some(t) {
                return Some(t);
            }
            self.events.pop();
        }
        None
    }

    /// An arrival at pipe `idx` (its own queue, or queue `queue`); decisions
    /// in `self.deps`. A packet whose scheduler instance would be one more
    /// than `budget.max` is decided [`Outcome::FlowLimit`].
    #[allow(clippy::too_many_arguments)]
    pub fn arrive(
        &mut self,
        idx: usize,
        queue: Option<u32>,
        now: u64,
        tag: u64,
        len_bytes: u32,
        key: &FlowKey,
        budget: &mut crate::pipe::FlowBudget,
    ) {
        self.expire_pipe(idx, now, budget);
        let p = self.links[idx].as_mut().expect("a scheduled pipe");
        let Some(slot) = p.instance_for(now, key, budget) else {
            self.deps.push(Departure {
                tag,
                outcome: Outcome::FlowLimit,
                at_ns: now,
                ce: false,
                queue: queue.unwrap_or(p.pipe),
                flow_id: 0,
            });
            return;
        };
        let l = p.slot_mut(slot).expect("a live slot");
        let before = l.next_event_ns();
        let charged = l.charged_bytes;
        l.arrive(now, tag, len_bytes, key, queue, budget, &mut self.deps);
        let (added, next) = (l.charged_bytes - charged, l.next_event_ns());
        if p.single.is_none() {
            // The single instance keeps its classes' charge itself.
            p.flows.add_charged_bytes(added);
        }
        if let Some(t) = next {
            if before != Some(t) {
                self.events.push(std::cmp::Reverse((t, idx, slot)));
            }
        }
    }

    /// Runs the earliest service instant (which must be `t`); decisions in `self.deps`.
    pub fn poll_one(&mut self, t: u64) {
        let Some(std::cmp::Reverse((at, idx, slot))) = self.events.pop() else {
            return;
        };
        debug_assert_eq!(at, t);
        let Some(l) = self.links[idx].as_mut().and_then(|p| p.slot_mut(slot)) else {
            return;
        };
        l.poll(at, &mut self.deps);
        if let Some(n) = l.next_event_ns() {
            self.events.push(std::cmp::Reverse((n, idx, slot)));
        }
    }
}

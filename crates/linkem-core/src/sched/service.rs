//! Exact, event-driven service of a pipe with a scheduler.
//!
//! # Model
//! The pipe's link (rate, overhead, delay, jitter, loss, ... as
//! [`crate::Link`]) takes the packet the scheduler picks whenever it is free:
//! - an arrival at t is classified into its class (queue instance), passes the
//!   class's `plr`, limit and enqueue AQM, and is queued with timestamp t;
//! - if the link is idle the scheduler picks at once (service at t);
//!   otherwise at the link's next free instant t_free, the exit of the packet
//!   on the wire floored to the ns: `t_L = max(t_L(previous), t) +
//!   (len + overhead)·8/rate`, kept exact as a fraction as [`crate::link`]
//!   does, so back-to-back service never drifts;
//! - the dequeue AQM (CoDel) sees the exact sojourn `t_free − t_enqueue`;
//! - the departure then takes the pipe's delay: release = ⌊t_L⌋ + delay.
//!
//! Arrivals at t are handled before the service instant t, so a packet that
//! arrives exactly when the link frees competes for it; the packet on the wire
//! counts against its queue's limit until it has left (as the single link of
//! [`crate::link`] counts it), so a pipe with one FIFO droptail queue gives
//! exactly the releases and drops of the closed-form link. Without a rate,
//! packets are served as they arrive.
//!
//! Packets are held as handles ([`Pkt::handle`]) into a slab: no copies.

use super::{Dropped, Pkt, QueueParams, Sched, SchedKind, SchedParams};
use crate::aqm::DropCause;
use crate::config::LinkConfig;
use crate::fate::Fate;
use crate::link::{Link, PacketMeta};
use crate::pipe::table::{Flow, FlowTable, MapIndex};
use crate::pipe::{FlowBudget, FlowMask, KeyHasher, MaskedKey};
use crate::rng::{Stream, StreamId};
use crate::rules::flow::FlowKey;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

mod instances;

pub use instances::{NodeSched, SchedPipe};

/// What became of a packet a scheduled pipe took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Left the link: the link's fate (delivered, loss, ...) and release time.
    Link {
        /// What the link decided: [`Fate::Delivered`], or a drop by its loss
        /// model or policer (the queue limit is the scheduler's, not the
        /// link's, so no [`Fate::QueueFull`] here).
        fate: Fate,
        /// For a delivery: when the packet leaves the emulator, in ns:
        /// ⌊t_L⌋ + d, t_L its exit from the wire and d the pipe's delay drawn
        /// for it (not before the previous release unless `reorder allow`).
        /// For a link drop: when it was dropped (the dequeue instant, or t_L
        /// with `loss-at link`).
        release_ns: u64,
        /// A second copy leaves right after this one (`duplicate P%`).
        duplicate: bool,
        /// Flip this bit of the frame (bit 0 = most significant bit of byte
        /// 0), from the link's corruption model.
        corrupt_bit: Option<u32>,
    },
    /// Dropped by its queue (its `plr`, limit or AQM) or by fq_*'s overflow;
    /// the packet never reached the link.
    Dropped(DropCause),
    /// Its scheduler instance did not exist and the node already held
    /// `--max-flows` dynamic instances: dropped at arrival.
    FlowLimit,
}

/// One decided packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Departure {
    /// The caller's tag given at arrival.
    pub tag: u64,
    /// Dropped by the queue, or what the link did with it.
    pub outcome: Outcome,
    /// When the decision was made (the drop, or the dequeue).
    pub at_ns: u64,
    /// Set CE on the frame: an AQM marked it (ECN) and the link delivered it.
    pub ce: bool,
    /// The queue number of its class (the pipe number for the pipe's own
    /// queue and for fq_* flows).
    pub queue: u32,
    /// The masked flow id of its class (0 without a mask; the flow index for
    /// fq_*).
    pub flow_id: u64,
}

/// A queue attached to this pipe's scheduler.
#[derive(Debug, Clone)]
pub struct QueueBinding {
    /// The queue number (`queue N`; the pipe's number for its own queue).
    pub number: u32,
    /// Parameters shared by every instance (class) of this queue.
    pub params: Arc<QueueParams>,
    /// `mask`: one class per distinct masked flow key, made at its first
    /// packet; None: one class for all the queue's traffic.
    pub mask: Option<FlowMask>,
    single: Option<u32>,
    index: HashMap<MaskedKey, u32, BuildHasherDefault<KeyHasher>>,
}

impl QueueBinding {
    /// A queue with no class yet (classes are made as traffic arrives).
    pub fn new(number: u32, params: QueueParams, mask: Option<FlowMask>) -> Self {
        QueueBinding {
            number,
            params: Arc::new(params),
            mask,
            single: None,
            index: HashMap::default(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Held {
    tag: u64,
}

/// A pipe's link under a scheduler: arrivals are queued in their class,
/// and whenever the link is free at t the scheduler's pick is sent:
/// `t_L = max(t_L(previous), t) + (len + overhead)·8/rate_bps` (exact
/// fraction), its sojourn `t − t_enqueue` is recorded at that dequeue, and
/// it is released at `⌊t_L⌋ + delay` (see the module doc).
#[derive(Debug)]
pub struct SchedLink {
    /// The pipe number.
    pub pipe: u32,
    /// The scheduler and its classes (counters in `sched.qs`).
    pub sched: Sched,
    /// The pipe's link without a queue limit: it serialises at `rate_bps`,
    /// then applies delay, jitter, loss, duplication, corruption.
    pub link: Link,
    /// The queues this link serves; `queues[0]` is the pipe's own queue.
    pub queues: Vec<QueueBinding>,
    queue_at: HashMap<u32, usize>,
    /// Key of each class (for listings).
    pub class_keys: Vec<MaskedKey>,
    /// The scheduler-masked key of this instance (all zero for a pipe whose
    /// scheduler has no mask).
    pub key: MaskedKey,
    /// [`MaskedKey::flow_id`] of `key` (0 without a scheduler mask).
    pub flow_id: u64,
    /// No packet of this instance is queued, on the wire or unreleased from
    /// here on (while [`SchedLink::queued`] is 0 and no service is due).
    pub idle_at_ns: u64,
    store: Vec<Held>,
    free: Vec<u32>,
    /// Class, frames bytes and exit (ns, exit after the floor) of the packet on the wire.
    on_wire: Option<(u32, u32, u64)>,
    next_service_ns: Option<u64>,
    rng: Stream,
    drops: Vec<Dropped>,
    fq_mask: FlowMask,
    /// fq_*: the class of each flow number (hash bucket) that has had a
    /// packet; a flow's class is made at its first packet, so an instance
    /// holds memory for the flows it has seen, not for `flows`.
    fq_class: HashMap<u32, u32, BuildHasherDefault<KeyHasher>>,
    /// fq_*: the parameters every flow's class shares.
    fq_params: Option<Arc<QueueParams>>,
    /// Bytes charged to the node's [`FlowBudget`] for the classes made for
    /// traffic ([`sched_class_bytes`] each; the instance's own charge is its
    /// pipe's).
    pub charged_bytes: usize,
}

/// Bytes charged for one scheduler instance (a masked scheduler's, made at
/// its flow's first packet), from type sizes: the instance in its slot, its
/// index and expiry entries, plus 512 bytes for what it allocates apart (its
/// scheduler object, its link's compiled parameters, its queue bindings). Its
/// classes are charged apart ([`sched_class_bytes`]).
pub fn sched_instance_bytes() -> usize {
    FlowTable::<SchedLink, MapIndex>::slot_bytes() + 512
}

/// Bytes charged for one class a scheduler makes for traffic (an fq_* flow,
/// a masked queue's instance), from type sizes: the class, its key for
/// listings, its index entry, 16 bytes of per-class scheduler state, and a
/// sojourn histogram at its largest (one 4-byte bin per 1/8 octave up to
/// 2^64 ns). Its queued packets are bounded by its limits, not charged.
pub fn sched_class_bytes() -> usize {
    std::mem::size_of::<super::Class>()
        + std::mem::size_of::<MaskedKey>()
        + (std::mem::size_of::<(MaskedKey, u32)>() + 1) * 8 / 7
        + 16
        + 4 * 496
}

/// The fields an fq_* scheduler hashes into its flow numbers: the 5-tuple, without
/// the IPv6 flow label.
const FULL_MASK: FlowMask = FlowMask {
    flow_label: 0,
    ..FlowMask::ALL
};

impl SchedLink {
    /// `link` is the pipe's link without a queue limit (the queues hold
    /// packets); `link_seed` seeds it as the pipe's single instance would be.
    /// `queues[0]` is the pipe's own queue (traffic sent to `pipe N`).
    pub fn new(
        pipe: u32,
        params: SchedParams,
        mut link: LinkConfig,
        link_seed: u64,
        burst_bytes: u64,
        queues: Vec<QueueBinding>,
    ) -> Self {
        link.queue_packets = None;
        link.queue_bytes = None;
        let mut l = Link::new(link, link_seed, 0);
        l.set_burst(burst_bytes);
        let queue_at = queues
            .iter()
            .enumerate()
            .map(|(i, q)| (q.number, i))
            .collect();
        let mut s = SchedLink {
            pipe,
            sched: Sched::new(params.clone()),
            link: l,
            queues,
            queue_at,
            class_keys: Vec::new(),
            key: MaskedKey::default(),
            flow_id: 0,
            idle_at_ns: 0,
            store: Vec::new(),
            free: Vec::new(),
            on_wire: None,
            next_service_ns: None,
            rng: Stream::new(link_seed ^ 0x5c4e_d000, 7, StreamId::Loss),
            drops: Vec::new(),
            fq_mask: FULL_MASK,
            fq_class: HashMap::default(),
            fq_params: None,
            charged_bytes: 0,
        };
        if params.kind.is_fq() {
            s.fq_params = Some(Arc::new(QueueParams {
                limit_packets: None,
                aqm: params.flow_aqm,
                ..Default::default()
            }));
        }
        s
    }

    /// When this link next frees (ns, the floored exit of the packet on the
    /// wire), while a packet is on the wire; the caller runs
    /// [`SchedLink::poll`] then. None: idle, an arrival is served at once.
    #[inline]
    pub fn next_event_ns(&self) -> Option<u64> {
        self.next_service_ns
    }

    /// Packets waiting (not counting the one on the wire).
    pub fn queued(&self) -> u64 {
        self.sched.qs.total_packets
    }

    /// The class of a packet, made if new and `budget` admits one more
    /// class; None when it does not.
    fn class_of(
        &mut self,
        queue: Option<u32>,
        key: &FlowKey,
        budget: &mut FlowBudget,
    ) -> Option<u32> {
        if let Some(qp) = &self.fq_params {
            let k = self.fq_mask.apply(key);
            let flow = (k.flow_id() % self.sched.params.flows as u64) as u32;
            if let Some(&c) = self.fq_class.get(&flow) {
                return Some(c);
            }
            if !budget.admits_bytes(sched_class_bytes()) {
                return None;
            }
            let c = self.sched.add_class(qp.clone(), self.pipe, flow as u64);
            self.fq_class.insert(flow, c);
            self.class_keys.push(k);
            self.charge(budget);
            return Some(c);
        }
        let qi = queue
            .and_then(|n| self.queue_at.get(&n).copied())
            .unwrap_or(0);
        let qb = &mut self.queues[qi];
        match qb.mask {
            None => {
                if let Some(c) = qb.single {
                    return Some(c);
                }
                let c = self.sched.add_class(qb.params.clone(), qb.number, 0);
                self.class_keys.push(MaskedKey::default());
                qb.single = Some(c);
                Some(c)
            }
            Some(m) => {
                let k = m.apply(key);
                if let Some(&c) = qb.index.get(&k) {
                    return Some(c);
                }
                if !budget.admits_bytes(sched_class_bytes()) {
                    return None;
                }
                let c = self
                    .sched
                    .add_class(qb.params.clone(), qb.number, k.flow_id());
                qb.index.insert(k, c);
                self.class_keys.push(k);
                self.charge(budget);
                Some(c)
            }
        }
    }

    fn charge(&mut self, budget: &mut FlowBudget) {
        budget.bytes += sched_class_bytes();
        self.charged_bytes += sched_class_bytes();
    }

    /// A packet arriving at `now` for `queue` (None: the pipe's own queue).
    /// Decisions made now go to `out`. A packet whose class is new and
    /// would take `budget` beyond its bytes is decided
    /// [`Outcome::FlowLimit`].
    #[allow(clippy::too_many_arguments)]
    pub fn arrive(
        &mut self,
        now: u64,
        tag: u64,
        len_bytes: u32,
        key: &FlowKey,
        queue: Option<u32>,
        budget: &mut FlowBudget,
        out: &mut Vec<Departure>,
    ) {
        let Some(c) = self.class_of(queue, key, budget) else {
            out.push(Departure {
                tag,
                outcome: Outcome::FlowLimit,
                at_ns: now,
                ce: false,
                queue: queue.unwrap_or(self.pipe),
                flow_id: 0,
            });
            return;
        };
        // Under prio the packet may join another queue's FIFO: its limit, counters and label.
        let c = self.sched.class_for(c);
        let handle = match self.free.pop() {
            Some(h) => {
                self.store[h as usize] = Held { tag };
                h
            }
            None => {
                self.store.push(Held { tag });
                (self.store.len() - 1) as u32
            }
        };
        let pkt = Pkt {
            handle,
            len_bytes,
            enq_ns: now,
            ect: key.ecn != 0,
            ce: false,
        };
        let extra = match self.on_wire {
            Some((wc, len, left)) if wc == c && now < left => (1, len as u64),
            _ => (0, 0),
        };
        let rng = &mut self.rng;
        let res = self
            .sched
            .enqueue(now, c, pkt, extra, &mut || rng.unit(), &mut self.drops);
        self.idle_at_ns = self.idle_at_ns.max(now);
        if let Err(cause) = res {
            self.free.push(handle);
            out.push(self.label(c, tag, Outcome::Dropped(cause), now, false));
        }
        self.flush_drops(now, out);
        if self.next_service_ns.is_none() {
            self.serve(now, out);
        }
    }

    /// Runs the service due at `now` (call when `next_event_ns() == Some(now)`).
    pub fn poll(&mut self, now: u64, out: &mut Vec<Departure>) {
        if self.next_service_ns.is_some_and(|t| t <= now) {
            let t = self.next_service_ns.take().expect("checked");
            self.serve(t, out);
        }
    }

    fn label(&self, c: u32, tag: u64, outcome: Outcome, at_ns: u64, ce: bool) -> Departure {
        let cl = &self.sched.qs.classes[c as usize];
        Departure {
            tag,
            outcome,
            at_ns,
            ce,
            queue: cl.queue,
            flow_id: cl.flow_id,
        }
    }

    fn flush_drops(&mut self, now: u64, out: &mut Vec<Departure>) {
        for d in std::mem::take(&mut self.drops) {
            let tag = self.store[d.pkt.handle as usize].tag;
            self.free.push(d.pkt.handle);
            out.push(self.label(d.class, tag, Outcome::Dropped(d.cause), now, false));
        }
    }

    /// The link is free at `t`: send what the scheduler picks.
    fn serve(&mut self, t: u64, out: &mut Vec<Departure>) {
        self.next_service_ns = None;
        loop {
            let got = self.sched.dequeue(t, &mut self.drops);
            self.flush_drops(t, out);
            let Some((c, p, ce)) = got else {
                return;
            };
            let tag = self.store[p.handle as usize].tag;
            self.free.push(p.handle);
            let v = self.link.on_arrival(
                t,
                PacketMeta {
                    len_bytes: p.len_bytes,
                },
            );
            let (clock, frac) = self.link.clock_ns();
            self.idle_at_ns = self.idle_at_ns.max(v.release_ns).max(clock + frac as u64);
            out.push(self.label(
                c,
                tag,
                Outcome::Link {
                    fate: v.fate,
                    release_ns: v.release_ns,
                    duplicate: v.duplicate,
                    corrupt_bit: v.corrupt_bit,
                },
                t,
                ce && v.fate == Fate::Delivered,
            ));
            if self.link.config().serialises() && (clock > t || (clock == t && frac)) {
                self.on_wire = Some((c, p.len_bytes, clock + frac as u64));
                // Even with nothing waiting: an arrival before then waits for this packet.
                self.next_service_ns = Some(clock);
                return;
            }
        }
    }

    /// The kind of scheduler.
    pub fn kind(&self) -> SchedKind {
        self.sched.params.kind
    }
}

impl Flow for SchedLink {
    fn key(&self) -> &MaskedKey {
        &self.key
    }
    /// While a packet is queued or on the wire: `now` (look again one hold
    /// later); then the release of its last packet.
    fn idle_since_ns(&self, now_ns: u64) -> u64 {
        if self.queued() == 0 && self.next_service_ns.is_none() {
            self.idle_at_ns
        } else {
            now_ns
        }
    }
    fn inner_charged_bytes(&self) -> usize {
        self.charged_bytes
    }
}

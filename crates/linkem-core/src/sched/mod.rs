//! Packet schedulers: which queue of a pipe sends next when its link is free
//! (Dummynet Revisited §3.6, Dummynet's `sched N config type T`).
//!
//! # Model
//! A pipe with a scheduler holds **classes**: queue instances (a `queue N`
//! object, one instance per masked flow id when it has a mask; or one flow of
//! fq_codel / fq_pie). Each class is a FIFO of [`Pkt`] handles (an index into
//! the owner's packet store, never a copy of the bytes) managed by its AQM
//! ([`crate::aqm`]). The scheduler orders the backlogged classes; when the
//! link is free the owner calls [`Sched::dequeue`] and sends what it returns
//! (see [`service`]).
//!
//! | type | algorithm | cost per packet | module |
//! |---|---|---|---|
//! | `fifo` | one FIFO over all classes in arrival order | O(1) | [`fifo`] |
//! | `wf2q+` | WF²Q+ (Bennett & Zhang 1997), virtual times | O(log N) | [`wf2q`] |
//! | `qfq` | QFQ (Checconi, Rizzo, Valente 2013), grouped slots | O(1) | [`qfq`] |
//! | `rr` | Deficit Round Robin (Shreedhar & Varghese 1995) | O(1) | [`drr`] |
//! | `prio` | strict priority, level 0 first, one FIFO per level | O(1) | [`prio`] |
//! | `fq_codel` | RFC 8290 with CoDel per flow | O(1) (overflow: O(flows)) | [`fq`] |
//! | `fq_pie` | RFC 8290's structure with PIE per flow | O(1) (overflow: O(flows)) | [`fq`] |
//!
//! Written by hand: the scheduler is the product, each must follow its paper
//! exactly, and `wf2q+`, `rr` and `prio` follow Dummynet's own rules where
//! they refine the paper (tests/sched_reference.rs compares each one packet
//! by packet with a reference written from the paper or from Dummynet's
//! algorithm), and a handle-based design keeps a packet's bytes where they
//! were received.
//!
//! # Conventions
//! Ties go to the lower class number. Packet lengths are frame bytes (what
//! the link serialises, without the pipe's `overhead`).

pub mod drr;
pub mod fifo;
pub mod fq;
pub mod prio;
pub mod qfq;
pub mod service;
pub mod wf2q;
pub mod words;

use crate::aqm::{Admit, AqmConfig, AqmState, DropCause};
pub use crate::queue::{Fifo, Pkt};

/// Sojourn times in a log-linear histogram: 8 bins per octave (≤ 12.5 %
/// relative error), exact below 16 ns, plus exact min, max and sum.
#[derive(Debug, Clone, Default)]
pub struct SojournHist {
    bins: Vec<u32>,
    /// Sojourns recorded (one per dequeued packet).
    pub count: u64,
    /// Exact sum of the recorded sojourns in ns (mean = `sum_ns / count`).
    pub sum_ns: u128,
    /// Exact largest recorded sojourn in ns (0 when empty).
    pub max_ns: u64,
}

impl SojournHist {
    fn bin(v: u64) -> usize {
        if v < 16 {
            v as usize
        } else {
            let e = 63 - v.leading_zeros() as usize; // ≥ 4
            (e - 2) * 8 + ((v >> (e - 3)) & 7) as usize
        }
    }
    fn low(b: usize) -> u64 {
        if b < 16 {
            b as u64
        } else {
            let e = b / 8 + 2;
            (8 + (b % 8) as u64) << (e - 3)
        }
    }
    /// Records one sojourn of `v` ns.
    pub fn record(&mut self, v: u64) {
        let b = Self::bin(v);
        if self.bins.len() <= b {
            self.bins.resize(b + 1, 0);
        }
        self.bins[b] += 1;
        self.count += 1;
        self.sum_ns += v as u128;
        self.max_ns = self.max_ns.max(v);
    }
    /// The q-quantile (0..=1) in ns: the smallest recorded value with at least
    /// ⌈q·count⌉ values at or below it, given as the midpoint of its bin
    /// (exact below 16 ns, within 12.5 % above) and never above
    /// [`SojournHist::max_ns`]. `quantile(0.5)` is the median, `quantile(0.99)`
    /// the 99th percentile. None when nothing was recorded.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0u64;
        for (b, &n) in self.bins.iter().enumerate() {
            seen += n as u64;
            if seen >= rank {
                let (lo, hi) = (Self::low(b), Self::low(b + 1));
                return Some(((lo + hi) / 2).min(self.max_ns));
            }
        }
        Some(self.max_ns)
    }
}

/// Counters of one class since it was created. A packet offered to the
/// class is counted once in `enqueued` or in one `drops_*` at arrival; an
/// enqueued packet later either leaves (`dequeued`), is dropped at dequeue by
/// CoDel (`drops_aqm`) or from the head by FQ's overflow (`drops_tail`), or is
/// still queued.
#[derive(Debug, Clone, Default)]
pub struct ClassStats {
    /// Packets accepted into the FIFO.
    pub enqueued: u64,
    /// Frame bytes of the accepted packets.
    pub enqueued_bytes: u64,
    /// Packets the scheduler sent to the link.
    pub dequeued: u64,
    /// Frame bytes of the sent packets.
    pub dequeued_bytes: u64,
    /// Drops because the queue was at its `queue` limit (slots or bytes,
    /// counting the packet on the wire), plus FQ head drops when the
    /// scheduler exceeded its total `limit` ([`DropCause::Tail`]).
    pub drops_tail: u64,
    /// RED/GRED early drops at arrival ([`DropCause::Early`]).
    pub drops_early: u64,
    /// CoDel drops at dequeue and PIE drops at arrival ([`DropCause::Aqm`]).
    pub drops_aqm: u64,
    /// Random drops by the queue's own `plr` at arrival ([`DropCause::Loss`]).
    pub drops_loss: u64,
    /// Packets marked CE instead of dropped (ECN): by RED/PIE at arrival, or
    /// by CoDel at dequeue. A packet is counted at most once per marking AQM
    /// decision.
    pub marked: u64,
    /// Sojourn of each dequeued packet: dequeue instant − enqueue instant, in
    /// ns (the wait in the queue, not the transmission or the pipe's delay).
    pub sojourn: SojournHist,
}

impl ClassStats {
    /// All drops of the class: tail + early + AQM + `plr` loss.
    pub fn drops(&self) -> u64 {
        self.drops_tail + self.drops_early + self.drops_aqm + self.drops_loss
    }
    fn count_drop(&mut self, c: DropCause) {
        match c {
            DropCause::Tail => self.drops_tail += 1,
            DropCause::Early => self.drops_early += 1,
            DropCause::Aqm => self.drops_aqm += 1,
            DropCause::Loss => self.drops_loss += 1,
        }
    }
}

/// What a queue (a `queue N config` object) sets for each of its instances.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueParams {
    /// `weight W`: the share of the link for WF²Q+ (φ = W / W_sum, see
    /// [`wf2q`]), QFQ (φ = W / ΣW of all its classes) and DRR (W × lmax bytes
    /// per round); ignored by fifo and fq_*; prio's level ([`QueueParams::pri`]).
    /// Default 1; 1..100 under wf2q+, 1..65536 under rr and qfq, 0..31 under
    /// prio.
    pub weight: u32,
    /// QFQ and DRR: the queue's `lmax` in frame bytes (QFQ: its largest
    /// packet; DRR: its quantum per unit of weight); None: the default (QFQ
    /// 1514, DRR the scheduler's `quantum`).
    pub lmax_bytes: Option<u32>,
    /// PRIO level 0..=31: the `weight` word when one is given, else 0
    /// (Dummynet's default); level 0 is served first.
    pub pri: u32,
    /// `queue N` in slots: an arrival is dropped (tail) when the queue
    /// already holds N packets, the one on the wire included. Default 50;
    /// None: no packet limit.
    pub limit_packets: Option<u32>,
    /// `queue 64KBytes`: an arrival is dropped (tail) when the queued bytes
    /// plus its own would exceed this; None: no byte limit. At most one of
    /// the two limits is set by the parser.
    pub limit_bytes: Option<u64>,
    /// The queue's AQM: droptail (default), RED/GRED and PIE decide at
    /// arrival, CoDel at dequeue.
    pub aqm: AqmConfig,
    /// Probability 0..=1 that an arrival is dropped before any other check
    /// (`plr`), counted in [`ClassStats::drops_loss`].
    pub plr: f64,
}

impl Default for QueueParams {
    fn default() -> Self {
        QueueParams {
            weight: 1,
            lmax_bytes: None,
            pri: 0,
            limit_packets: Some(50),
            limit_bytes: None,
            aqm: AqmConfig::DropTail,
            plr: 0.0,
        }
    }
}

/// One queue instance.
#[derive(Debug, Clone)]
pub struct Class {
    /// The packets waiting in this instance.
    pub fifo: Fifo,
    /// The running state of its AQM (RED average, CoDel or PIE controller).
    pub aqm: AqmState,
    /// Its queue's parameters, shared by every instance of that queue.
    pub params: std::sync::Arc<QueueParams>,
    /// Its counters.
    pub stats: ClassStats,
    /// Caller's label: the queue number (`queue N`, or the pipe number for
    /// the pipe's own queue and for fq_* flows).
    pub queue: u32,
    /// Caller's label: the masked flow id of this instance (0 without a
    /// mask; the flow index 0..flows for fq_*).
    pub flow_id: u64,
}

/// A dropped packet and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    /// Class the packet was queued in.
    pub class: u32,
    /// The dropped packet (its handle is the owner's to free).
    pub pkt: Pkt,
    /// Why: [`DropCause::Aqm`] for CoDel, [`DropCause::Tail`] for FQ's
    /// overflow.
    pub cause: DropCause,
}

/// The classes of one scheduler.
#[derive(Debug, Clone, Default)]
pub struct Queues {
    /// Every class, indexed by class number.
    pub classes: Vec<Class>,
    /// Transmission time of a typical packet in ns: RED's average decays by
    /// (1 − w_q)^((now − idle start)/red_s_ns) over an idle period. 0 (the
    /// default) disables that decay.
    pub red_s_ns: u64,
    /// Packets queued over all classes (not the one on the wire); fq_*
    /// compares it with its total `limit`.
    pub total_packets: u64,
}

impl Queues {
    /// Length in bytes of class `c`'s head packet, None when it is empty.
    #[inline]
    pub fn head_len(&self, c: u32) -> Option<u32> {
        self.classes[c as usize].fifo.head().map(|p| p.len_bytes)
    }

    /// Class `c` holds no packet.
    #[inline]
    pub fn is_empty(&self, c: u32) -> bool {
        self.classes[c as usize].fifo.is_empty()
    }

    /// Runs a class's enqueue checks (plr, limit, RED/PIE) and queues the packet.
    /// `extra` is the occupancy of this class outside its FIFO (the packet on
    /// the wire, which counts until it has left, as in [`crate::link`]) as
    /// (packets, bytes). The checks run in that order: `plr` (`draw() < plr`),
    /// then the limit (packets: `len + extra ≥ limit`; bytes: `bytes + extra +
    /// len > limit`), then RED (on bytes when the limit is in bytes, else on
    /// packets) or PIE. `draw` gives uniforms in [0, 1).
    ///
    /// Ok(true): queued and marked CE; Ok(false): queued; Err: dropped, with
    /// the cause counted in the class's stats.
    pub fn push(
        &mut self,
        now: u64,
        c: u32,
        mut pkt: Pkt,
        extra: (u32, u64),
        draw: &mut dyn FnMut() -> f64,
    ) -> Result<bool, DropCause> {
        let red_s = self.red_s_ns;
        let cl = &mut self.classes[c as usize];
        let p = &*cl.params;
        let res = (|| {
            if p.plr > 0.0 && draw() < p.plr {
                return Err(DropCause::Loss);
            }
            let n = cl.fifo.len() as u64 + extra.0 as u64;
            let b = cl.fifo.bytes + extra.1;
            if p.limit_packets.is_some_and(|l| n >= l as u64)
                || p.limit_bytes.is_some_and(|l| b + pkt.len_bytes as u64 > l)
            {
                return Err(DropCause::Tail);
            }
            let admit = match (&p.aqm, &mut cl.aqm) {
                (AqmConfig::Red(cfg), AqmState::Red(r)) => {
                    let q = if p.limit_bytes.is_some() { b } else { n };
                    r.arrive(cfg, now, q, red_s, pkt.ect, draw)
                }
                (AqmConfig::Pie(cfg), AqmState::Pie(s)) => {
                    s.catch_up(cfg, now, cl.fifo.head().map(|h| h.enq_ns));
                    s.arrive(cfg, cl.fifo.bytes, pkt.ect, draw)
                }
                _ => Admit::Accept,
            };
            match admit {
                Admit::Accept => Ok(false),
                Admit::Mark => Ok(true),
                Admit::Drop(c) => Err(c),
            }
        })();
        match res {
            Ok(mark) => {
                pkt.enq_ns = now;
                pkt.ce = mark;
                cl.fifo.push(pkt);
                cl.stats.enqueued += 1;
                cl.stats.enqueued_bytes += pkt.len_bytes as u64;
                if mark {
                    cl.stats.marked += 1;
                }
                self.total_packets += 1;
            }
            Err(cause) => cl.stats.count_drop(cause),
        }
        res
    }

    /// Takes the next packet of class `c` through its AQM (CoDel may drop
    /// packets on the way: they go to `drops`). Returns the packet and whether
    /// to mark it CE.
    pub fn pop(&mut self, now: u64, c: u32, drops: &mut Vec<Dropped>) -> Option<(Pkt, bool)> {
        let cl = &mut self.classes[c as usize];
        let before = cl.fifo.len();
        let out = match (&cl.params.aqm, &mut cl.aqm) {
            (AqmConfig::CoDel(cfg), AqmState::CoDel(s)) => {
                let stats = &mut cl.stats;
                s.dequeue(cfg, now, &mut cl.fifo, &mut |pkt| {
                    stats.drops_aqm += 1;
                    drops.push(Dropped {
                        class: c,
                        pkt,
                        cause: DropCause::Aqm,
                    });
                })
            }
            (AqmConfig::Pie(cfg), AqmState::Pie(s)) => {
                s.catch_up(cfg, now, cl.fifo.head().map(|h| h.enq_ns));
                cl.fifo.pop().map(|p| (p, false))
            }
            (_, AqmState::Red(r)) => {
                let p = cl.fifo.pop();
                if cl.fifo.is_empty() {
                    r.emptied(now);
                }
                p.map(|p| (p, false))
            }
            _ => cl.fifo.pop().map(|p| (p, false)),
        };
        self.total_packets -= (before - cl.fifo.len()) as u64;
        if let Some((p, mark)) = out {
            cl.stats.dequeued += 1;
            cl.stats.dequeued_bytes += p.len_bytes as u64;
            if mark {
                cl.stats.marked += 1;
            }
            cl.stats.sojourn.record(now.saturating_sub(p.enq_ns));
        }
        out.map(|(p, mark)| (p, mark || p.ce))
    }

    /// Drops the head of class `c` (FQ's overflow).
    pub fn drop_head(&mut self, c: u32, cause: DropCause) -> Option<Pkt> {
        let cl = &mut self.classes[c as usize];
        let p = cl.fifo.pop()?;
        cl.stats.count_drop(cause);
        self.total_packets -= 1;
        Some(p)
    }
}

/// A packet scheduler over the classes of a [`Queues`].
pub trait Scheduler: std::fmt::Debug + Send {
    /// Class `class` exists (classes are numbered densely from 0).
    fn add_class(&mut self, class: u32, params: &QueueParams);
    /// Class `class` is now in `qs` too (called right after
    /// [`Scheduler::add_class`]; classes may be made while others are
    /// backlogged, as fq_* makes a flow at its first packet).
    fn class_added(&mut self, _class: u32, _qs: &Queues) {}
    /// The class whose FIFO a packet classified to `c` joins: `c` itself,
    /// except under prio, whose queues of one level share the FIFO of the
    /// one already backlogged ([`prio`]).
    #[inline]
    fn class_for(&self, c: u32) -> u32 {
        c
    }
    /// A packet has been added to `class`'s FIFO (already in `qs`).
    fn enqueued(&mut self, class: u32, qs: &Queues);
    /// The next packet to send at `now`, with its class and CE mark; AQM drops
    /// on the way go to `drops`.
    fn dequeue(
        &mut self,
        now: u64,
        qs: &mut Queues,
        drops: &mut Vec<Dropped>,
    ) -> Option<(u32, Pkt, bool)>;
    /// No class is listed as backlogged (a scheduler may keep a class listed
    /// after CoDel emptied it, until it next passes it).
    fn is_empty(&self) -> bool;
    /// The head of class `c` was dropped outside [`Scheduler::dequeue`]
    /// (FQ's overflow): its byte count changed.
    fn head_dropped(&mut self, _c: u32, _qs: &Queues) {}
    /// The class holding the most bytes, the lowest-numbered one among equals
    /// (RFC 8290 §4.1's overflow victim); None when no class holds a packet.
    /// The default scans every class; a scheduler that knows its backlogged
    /// classes may scan only those.
    fn fattest(&mut self, qs: &Queues) -> Option<u32> {
        (0..qs.classes.len())
            .max_by_key(|&i| (qs.classes[i].fifo.bytes, std::cmp::Reverse(i)))
            .map(|i| i as u32)
    }
}

/// Scheduler types (`sched N config type T`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedKind {
    /// `fifo`: arrival order over all classes ([`fifo`]).
    Fifo,
    /// `wf2q+` (also `wf2q`, `wf2qp`): WF²Q+, Dummynet's default ([`wf2q`]).
    Wf2q,
    /// `qfq`: Quick Fair Queueing ([`qfq`]).
    Qfq,
    /// `rr` (also `drr`): Deficit Round Robin ([`drr`]).
    Rr,
    /// `prio`: strict priority, level 0 first ([`prio`]).
    Prio,
    /// `fq_codel` (also `fq-codel`): RFC 8290 with CoDel per flow ([`fq`]).
    FqCodel,
    /// `fq_pie` (also `fq-pie`): RFC 8290's flow queueing with PIE per flow
    /// ([`fq`]).
    FqPie,
}

impl SchedKind {
    /// The kind named by a `type` word (case-insensitive, with the aliases
    /// above); None for an unknown name.
    pub fn parse(w: &str) -> Option<SchedKind> {
        Some(match w.to_ascii_lowercase().as_str() {
            "fifo" => SchedKind::Fifo,
            "wf2q+" | "wf2q" | "wf2qp" => SchedKind::Wf2q,
            "qfq" => SchedKind::Qfq,
            "rr" | "drr" => SchedKind::Rr,
            "prio" => SchedKind::Prio,
            "fq_codel" | "fq-codel" => SchedKind::FqCodel,
            "fq_pie" | "fq-pie" => SchedKind::FqPie,
            _ => return None,
        })
    }
    /// Upper-case display name (`WF2Q+`, `FQ_CODEL`, ...).
    pub fn name(self) -> &'static str {
        match self {
            SchedKind::Fifo => "FIFO",
            SchedKind::Wf2q => "WF2Q+",
            SchedKind::Qfq => "QFQ",
            SchedKind::Rr => "RR",
            SchedKind::Prio => "PRIO",
            SchedKind::FqCodel => "FQ_CODEL",
            SchedKind::FqPie => "FQ_PIE",
        }
    }
    /// fq_codel or fq_pie: classes are the `flows` hash buckets of the
    /// 5-tuple, made when the pipe is built, and `limit` applies.
    pub fn is_fq(self) -> bool {
        matches!(self, SchedKind::FqCodel | SchedKind::FqPie)
    }
}

/// Parameters of a scheduler (`sched N config ...`).
#[derive(Debug, Clone, PartialEq)]
pub struct SchedParams {
    /// The algorithm (`type`, default wf2q+).
    pub kind: SchedKind,
    /// rr: the `lmax` of its queues that give none (Q_i = weight × lmax,
    /// 64..2048); fq_*: bytes a flow may send per round, its deficit refill
    /// (RFC 8290 §4), 1..1048576. Default 1514 (one Ethernet frame).
    pub quantum_bytes: u32,
    /// fq_*: packets queued over all flows before the head of the flow with
    /// the most bytes is dropped (RFC 8290 §4.1). Default 10240, 1..20480.
    pub limit_packets: u32,
    /// fq_*: number of flow queues; a packet goes to flow (hash of its
    /// 5-tuple) mod `flows`. Default 1024, 1..65536.
    pub flows: u32,
    /// fq_*: the AQM of each flow: CoDel (target 5 ms, interval 100 ms) for
    /// fq_codel, PIE (target 15 ms, tupdate 15 ms) for fq_pie, ECN on.
    pub flow_aqm: AqmConfig,
}

impl SchedParams {
    /// The defaults of `kind`: quantum 1514 B, limit 10240 packets, 1024
    /// flows, and the per-flow AQM of [`SchedParams::flow_aqm`] with ECN on.
    pub fn new(kind: SchedKind) -> Self {
        let flow_aqm = match kind {
            SchedKind::FqPie => AqmConfig::Pie(crate::aqm::PieConfig {
                ecn: true,
                ..Default::default()
            }),
            _ => AqmConfig::CoDel(crate::aqm::CoDelConfig {
                ecn: true,
                ..Default::default()
            }),
        };
        SchedParams {
            kind,
            quantum_bytes: 1514,
            limit_packets: 10240,
            flows: 1024,
            flow_aqm,
        }
    }
}

/// Makes the scheduler of `p.kind` (rr and fq_* take `p.quantum_bytes`; the
/// others read their classes' [`QueueParams`] in [`Scheduler::add_class`]).
pub fn make(p: &SchedParams) -> Box<dyn Scheduler> {
    match p.kind {
        SchedKind::Fifo => Box::new(fifo::FifoSched::default()),
        SchedKind::Wf2q => Box::new(wf2q::Wf2q::default()),
        SchedKind::Qfq => Box::new(qfq::Qfq::default()),
        SchedKind::Rr => Box::new(drr::Drr::new(p.quantum_bytes)),
        SchedKind::Prio => Box::new(prio::Prio::default()),
        SchedKind::FqCodel | SchedKind::FqPie => Box::new(fq::Fq::new(p.quantum_bytes)),
    }
}

/// A scheduler with its classes: the object a pipe owns.
#[derive(Debug)]
pub struct Sched {
    /// What it was built with.
    pub params: SchedParams,
    /// Its classes and their counters.
    pub qs: Queues,
    s: Box<dyn Scheduler>,
}

impl Sched {
    /// A scheduler of `params.kind` with no class yet.
    pub fn new(params: SchedParams) -> Sched {
        let s = make(&params);
        Sched {
            params,
            qs: Queues::default(),
            s,
        }
    }

    /// Adds a class (a queue instance) with the queue's parameters and the
    /// caller's labels [`Class::queue`] and [`Class::flow_id`]; returns its
    /// number (classes are numbered 0, 1, ... in the order added).
    pub fn add_class(
        &mut self,
        params: std::sync::Arc<QueueParams>,
        queue: u32,
        flow_id: u64,
    ) -> u32 {
        let c = self.qs.classes.len() as u32;
        self.s.add_class(c, &params);
        self.qs.classes.push(Class {
            fifo: Fifo::default(),
            aqm: AqmState::new(&params.aqm),
            params,
            stats: ClassStats::default(),
            queue,
            flow_id,
        });
        self.s.class_added(c, &self.qs);
        c
    }

    /// The class whose FIFO a packet classified to `c` joins now (see
    /// [`Scheduler::class_for`]); `extra` of [`Sched::enqueue`] is that
    /// class's occupancy outside its FIFO.
    pub fn class_for(&self, c: u32) -> u32 {
        self.s.class_for(c)
    }

    /// Offers a packet to class `c` (queued in [`Sched::class_for`]`(c)`) at `now`. Ok(true): accepted and to be
    /// marked CE. A drop returns the cause (the packet is not kept). With
    /// fq_*, an overflow of the total limit drops the head of the fattest
    /// flow instead: returned in `drops`.
    pub fn enqueue(
        &mut self,
        now: u64,
        c: u32,
        pkt: Pkt,
        extra: (u32, u64),
        draw: &mut dyn FnMut() -> f64,
        drops: &mut Vec<Dropped>,
    ) -> Result<bool, DropCause> {
        let c = self.s.class_for(c);
        let mark = self.qs.push(now, c, pkt, extra, draw)?;
        self.s.enqueued(c, &self.qs);
        if self.params.kind.is_fq() && self.qs.total_packets > self.params.limit_packets as u64 {
            // RFC 8290 §4.1: drop from the head of the flow with the most bytes.
            let fat = self.s.fattest(&self.qs).expect("a packet is queued");
            let dropped = self.qs.drop_head(fat, DropCause::Tail);
            self.s.head_dropped(fat, &self.qs);
            if let Some(p) = dropped {
                drops.push(Dropped {
                    class: fat,
                    pkt: p,
                    cause: DropCause::Tail,
                });
            }
        }
        Ok(mark)
    }

    /// The packet to send when the link is free at `now` (ns): (class,
    /// packet, mark CE), None when nothing waits. Call it only when the link
    /// is free: the sojourn and CoDel's decision are taken at `now`. Packets
    /// CoDel drops on the way go to `drops`.
    #[inline]
    pub fn dequeue(&mut self, now: u64, drops: &mut Vec<Dropped>) -> Option<(u32, Pkt, bool)> {
        self.s.dequeue(now, &mut self.qs, drops)
    }

    /// No packet waits (some schedulers keep empty flows listed until they
    /// next pass them).
    pub fn is_empty(&self) -> bool {
        self.qs.total_packets == 0
    }
}
